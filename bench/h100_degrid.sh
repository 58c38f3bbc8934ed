#!/usr/bin/env bash
# The GPU degridding benchmark: pipelines/bench_degrid_el56-82_gpu.yaml once per degrid.wproj
# cuda variant (uvflow, gather, scatter, moving_window; separate runs, so each one's device time is
# its own), then the seeds-style table (visibilities/s, kernel-point updates/s, share of the FP32
# FMA ceiling) from the run reports. moving_window reads the raw blocks (it groups them by
# baseline itself), the others the w-sorted ones.
# Usage: bench/h100_degrid.sh [uvflow command] [output.md]
set -uo pipefail
cd "$(dirname "$0")/.."
uvflow=${1:-build/uvflow}
out=${2:-bench/results/h100_degrid.md}
mkdir -p out
rm -f out/degrid_el56-82_*.report.json  # an earlier run's reports must not stand in for a failed one
bundle_commit=$(dirname "${uvflow%% *}")/COMMIT
[[ -z ${UVFLOW_COMMIT:-} && -f $bundle_commit ]] && export UVFLOW_COMMIT=$(cat "$bundle_commit")
failed=0
for variant in uvflow gather scatter moving_window; do
  input=sort2
  [[ $variant == moving_window ]] && input=vis2.vis
  echo "== $variant"
  $uvflow run --no-progress pipelines/bench_degrid_el56-82_gpu.yaml --set vars.variant=$variant \
    --set vars.degrid_input=$input 2>&1 | grep -E "^(degrid|sort2|model|grid) |wall|rror"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "failed: $variant" >&2; failed=1; }
done
python3 bench/report_degrid.py --device "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" \
  out/degrid_el56-82_*.report.json >"$out"
cat "$out"
exit $failed
