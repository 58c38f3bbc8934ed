#!/usr/bin/env bash
# The plugin SDK as a plugin author meets it: uvflow installed into a clean prefix, the examples
# copied to an unrelated folder and built there with find_package(uvflow) (no build type given:
# the package config must make it Release), every installed header compiling on its own, and each
# example run from YAML by the installed `uvflow`. The cuda example is built where nvcc is and run
# where a GPU is.
# Usage: plugin_example_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
passed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }

cmake --install "$build" --prefix "$prefix" >"$work/install.txt"
uvflow=$prefix/bin/uvflow
test -x "$uvflow" && ls "$prefix"/lib*/libuvflow.so >/dev/null && ls "$prefix"/lib*/cmake/uvflow/uvflowConfigVersion.cmake >/dev/null
ok "installed: bin/uvflow, libuvflow.so, the package config"

# Installed headers stand alone: none reaches for a header that is not installed (graph/, stages/).
cuda_inc=()
[[ -d /usr/local/cuda/include ]] && cuda_inc=(-I/usr/local/cuda/include)
for h in $(cd "$prefix/include/uvflow" && find runtime -name '*.hpp' | sort); do
  case $h in runtime/cuda_check.hpp|runtime/cufft_plan.hpp) [[ ${#cuda_inc[@]} == 0 ]] && continue ;; esac
  echo "#include \"$h\"" >"$work/header.cpp"
  c++ -std=c++20 -fsyntax-only -I"$prefix/include/uvflow" "${cuda_inc[@]}" "$work/header.cpp" ||
    { echo "FAIL: installed header $h does not compile on its own"; exit 1; }
done
ok "every installed header compiles on its own"

cp -r "$src/examples/plugin" "$work/examples"
cmake -S "$work/examples" -B "$work/build" -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.txt"
grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "$work/build/CMakeCache.txt" ||
  { echo "FAIL: the plugin build is not Release by default"; cat "$work/configure.txt"; exit 1; }
cmake --build "$work/build" -j2 >"$work/build.txt" || { cat "$work/build.txt"; exit 1; }
grep -q -- '-O3' "$work/build/CMakeFiles/amplitude_clip.dir/flags.make" ||
  { echo "FAIL: the plugin was not compiled with Release flags"; exit 1; }
for p in amplitude_clip point_source image_peak; do test -f "$work/build/$p.so"; done
ok "examples built against the installed uvflow, Release by default"

mkdir "$work/run" && cd "$work/run"
"$uvflow" --plugin "$work/build/amplitude_clip.so" describe example.amplitude_clip | grep -q "max_jy"
ok "uvflow describe example.amplitude_clip"

# The filter: both blocks of the tiny simulation go through the plugin stage.
"$uvflow" run --no-progress "$work/examples/clip.yaml" --plugin-path "$work/build" | tee clip.txt
grep -Eq "^clip +example.amplitude_clip +cpu +2 " clip.txt
test -s out/plugin_clip.fits
ok "filter example (clip.yaml)"

# The source and the sink: a 1 Jy point source at the phase centre peaks there at about 1 Jy/beam.
check_peak() {  # FILE FLUX
  read -r index x y value <"$1"
  echo "peak: image $index at ($x, $y) = $value"
  [[ $index == 0 && $x == 64 && $y == 64 ]] && awk -v v="$value" -v f="$2" 'BEGIN { exit !(v > 0.95 * f && v < 1.05 * f) }'
}
"$uvflow" run --no-progress "$work/examples/source.yaml" --plugin-path "$work/build" | tee source.txt
grep -Eq "^vis +example.point_source +cpu +4 " source.txt
check_peak out/peak.txt 1
ok "source and sink examples (source.yaml)"

if [[ -f $work/build/vis_scale.so ]]; then
  "$uvflow" --plugin "$work/build/vis_scale.so" describe example.vis_scale | grep -q "cuda"
  ok "cuda example built (vis_scale.so)"
  if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU; then
    "$uvflow" run --no-progress "$work/examples/scale_cuda.yaml" --plugin-path "$work/build" | tee cuda.txt
    check_peak out/peak_x2.txt 2
    ok "cuda example (scale_cuda.yaml)"
  else
    echo "no GPU here: scale_cuda.yaml not run"
  fi
else
  echo "no CUDA compiler or uvflow without CUDA: the cuda example was not built"
fi
echo "$passed passed, 0 failed"
