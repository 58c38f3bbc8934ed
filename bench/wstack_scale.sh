#!/usr/bin/env bash
# grid.wstack on the GPU against the number of visibilities (issue 14's 1e9 visibilities/s at
# epsilon 1e-4 and an 8192^2 image): bench/wstack_scale.yaml with 1, 16 and 32 channels of the
# el56-82 track (31.4 M, 502 M and 1.0 G visibilities), the device pool reserved before the
# stream (POOL_MB, default 110000: the 32-channel pass needs about 75 GB; lower it on a smaller
# GPU and leave out CHANNELS it cannot hold), one warm-up run first, then REPEATS runs of each
# count in turn; then bench/report_wstack_scale.py's table. Usage, from the repository root with
# the GPU bundle unpacked (docs/gpu.md):
#   bench/wstack_scale.sh [uvflow command, default /tmp/uvflow-gpu/run uvflow] [output.md]
set -uo pipefail
cd "$(dirname "$0")/.."
uvflow=${1:-/tmp/uvflow-gpu/run uvflow}
out=${2:-out/wstack_scale/wstack_scale.md}
dir=out/wstack_scale
rm -rf "$dir" && mkdir -p "$dir"
bundle_commit=$(dirname "${uvflow%% *}")/COMMIT
[[ -z ${UVFLOW_COMMIT:-} && -f $bundle_commit ]] && export UVFLOW_COMMIT=$(cat "$bundle_commit")
pool=${POOL_MB:-110000}
failed=0
one() {  # channels report
  $uvflow run --no-progress bench/wstack_scale.yaml --set vars.channels=$1 --set vars.pool_mb=$pool \
    --set run.report=$2 --set fits.path=/tmp/wstack_scale.fits 2>&1 | grep -E "^wstack |wall|rror"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "failed: $1 channels" >&2; failed=1; }
}
one 1 "$dir/warmup.json"
for k in $(seq 1 ${REPEATS:-2}); do
  for ch in ${CHANNELS:-1 16 32}; do one $ch "$dir/ch${ch}_run$k.json"; done
done
rm -f /tmp/wstack_scale.fits
python3 bench/report_wstack_scale.py --device "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" \
  "$dir"/ch*_run*.json >"$out"
cat "$out"
exit $failed
