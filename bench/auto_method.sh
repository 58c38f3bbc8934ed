#!/usr/bin/env bash
# `choose: auto` checked by running both options (issue 14): for the presets el56-82, el30-56,
# el82-70 and a wide low-frequency field, what auto picks with the kernel cache cold, then
# bench/auto_method.yaml run with wproj (cold: it fills the cache) and wstack, what auto picks with
# the cache warm, wproj once more (warm), and the table of bench/report_auto_method.py. Usage: bench/auto_method.sh [uvflow command] [output.md]
# (the uvflow command of a GPU bundle: "/tmp/uvflow-gpu/run uvflow"; backend cuda by default,
# `BACKEND=cpu` for this machine).
set -uo pipefail
cd "$(dirname "$0")/.."
uvflow=${1:-build/uvflow}
out=${2:-bench/results/auto_method.md}
backend=${BACKEND:-cuda}
dir=out/auto_method
rm -rf "$dir" && mkdir -p "$dir"
# A kernel cache of its own, cold at the start: what auto estimates for kernels.wproj depends on it.
export XDG_CACHE_HOME=$(mktemp -d)
bundle_commit=$(dirname "${uvflow%% *}")/COMMIT
[[ -z ${UVFLOW_COMMIT:-} && -f $bundle_commit ]] && export UVFLOW_COMMIT=$(cat "$bundle_commit")
declare -A cases=(
  [el56-82]="vars.preset=el56-82"
  [el30-56]="vars.preset=el30-56"
  [el82-70]="vars.preset=el82-70"
  [wide_150MHz]="vars.preset=el82-70 vars.freq_hz=150e6 vars.npix=4096 vars.cell_arcsec=7 vars.max_conv_size=4096")
sets_of() { local s=(--set vars.backend=$backend); for a in $1; do s+=(--set "$a"); done; echo "${s[@]}"; }
failed=0
for name in el56-82 el30-56 el82-70 wide_150MHz; do
  sets=$(sets_of "${cases[$name]}")
  [[ $backend == cpu ]] && sets="$sets --set vars.layouts=rows --set vars.tile_u=128 --set vars.tile_v=128"
  $uvflow plan bench/auto_method.yaml $sets 2>/dev/null | grep -A1 "choice imaging" | tail -1 >"$dir/$name.auto_before.txt"
  # wproj first, with the cache cold (it then holds the kernels), wstack, and wproj again (warm).
  for run in wproj wstack wproj_warm; do
    echo "== $name $run"
    $uvflow run --no-progress bench/auto_method.yaml $sets --set vars.method=${run%_warm} \
      --set run.report=$dir/$name.$run.json --set fits.path=/tmp/auto_method.fits 2>&1 | grep -E "^(kernels|grid|wstack) |wall|error"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || echo "failed: $name $run"
    [[ $run == wstack ]] && $uvflow plan bench/auto_method.yaml $sets 2>/dev/null | grep -A1 "choice imaging" | tail -1 \
      >"$dir/$name.auto_after.txt"
  done
done
python3 bench/report_auto_method.py --backend "$backend" \
  --device "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" "$dir" >"$out"
cat "$out"
