#!/usr/bin/env bash
# Fuzzes the pipeline loader (tests/fuzz/pipeline_loader_fuzz.cpp: a pipeline file's text and --set
# strings, through load_plan and preflight as `uvflow check` runs them) with libFuzzer, AddressSanitizer
# and UndefinedBehaviorSanitizer, for SECONDS (default 60), in its own build folder build-fuzz/.
#   scripts/fuzz.sh [SECONDS]
# New inputs go to build-fuzz/corpus (the seeds: pipelines/, tests/configs, tests/pipelines,
# tests/fuzz/seeds); a crash, hang (-timeout) or leak is written to build-fuzz/artifacts/ and fails
# the script. Replay one with  build-fuzz/tests/fuzz/pipeline_loader_fuzz FILE. JOBS (default 2) and
# NICE (default 10) bound what the build takes on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
jobs=${JOBS:-2}
nice=${NICE:-10}

# libFuzzer is clang's. clang 16 at least: uvflow's C++20 initialises aggregates with parentheses
# (P0960), which clang 14 (Debian 12's default clang) rejects. Debian 12 packages it as clang-16.
if ! command -v clang++-16 >/dev/null || ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
     clang++-16 -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
  apt-get install -y --no-install-recommends clang-16 libclang-rt-16-dev >/dev/null
fi

mkdir -p build-fuzz
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
flags="-fno-omit-frame-pointer -fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined"
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUVFLOW_CUDA=OFF -DUVFLOW_FUZZ=ON \
      -DCMAKE_C_COMPILER=clang-16 -DCMAKE_CXX_COMPILER=clang++-16 "${launcher[@]}" \
      -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
      -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
      >build-fuzz/configure.log || { cat build-fuzz/configure.log; exit 1; }
nice -n "$nice" cmake --build build-fuzz -j"$jobs" --target pipeline_loader_fuzz >build-fuzz/build.log 2>&1 ||
  { grep -E "error" build-fuzz/build.log | head -30; exit 1; }

mkdir -p build-fuzz/corpus build-fuzz/artifacts
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1:print_stacktrace=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# -timeout: an input taking 10 s is a hang; -rss_limit_mb: one taking 2 GiB is a memory bug.
status=0
nice -n "$nice" build-fuzz/tests/fuzz/pipeline_loader_fuzz build-fuzz/corpus pipelines tests/configs tests/pipelines \
  tests/fuzz/seeds -dict=tests/fuzz/pipeline.dict -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
  -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix=build-fuzz/artifacts/ >build-fuzz/fuzz.log 2>&1 || status=$?
grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)|ERROR|SUMMARY|^stat::|^Done " build-fuzz/fuzz.log || true
if ls build-fuzz/artifacts/* >/dev/null 2>&1; then
  echo "fuzz: failing inputs in build-fuzz/artifacts/ (log: build-fuzz/fuzz.log)"; exit 1
fi
exit "$status"
