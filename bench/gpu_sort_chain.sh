#!/usr/bin/env bash
# The device time of every kernel of the sort chain (uvw.w_sort, uvw.bounding_box, tiles.count,
# tiles.bucket_sort) and of the gridder, per block, from Nsight Compute's gpu__time_duration with the
# clocks left alone. The per-stage "device ms" of a run's table are CUDA-event intervals on each
# stage's stream, which with several blocks in flight also count time spent waiting behind other
# streams' work; ncu runs one kernel at a time, so these are the kernels' own times.
# Usage (on the GPU machine, docs/gpu.md): bench/gpu_sort_chain.sh "uvflow command" [PRESET] [BLOCKS]
set -uo pipefail
cd "$(dirname "$0")/.."
uvflow=$1 preset=${2:-el56-82} blocks=${3:-2}
csv=$(mktemp)
# One block's chain is about 27 kernels: capture the first BLOCKS blocks.
timeout 300 ncu --clock-control none --csv --metrics gpu__time_duration.sum -c $((27 * blocks)) \
  $uvflow run --no-progress bench/gpu_preset.yaml --set vars.preset="$preset" --set fits.path=/tmp/sort_chain.fits \
  --set run.report=/tmp/sort_chain.json >"$csv" 2>&1
grep '^"' "$csv" | python3 "$(dirname "$0")/report_sort_chain.py"
