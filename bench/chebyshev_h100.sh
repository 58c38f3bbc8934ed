#!/usr/bin/env bash
# Chebyshev-evaluated kernels (SDP Memo 73) against the table on the GPU, el56-82: grid.tiled cuda
# variant uvflow (the table) and chebyshev with 11, 25 and 50 coefficients (in r^2), each in its own
# run of bench/gpu_preset.yaml (so each one's device time is its own), then bench/report_gpu.py's
# table (device ms per step, gridding visibilities/s and kernel-point updates/s, share of the FP32
# FMA ceiling); then bench/chebyshev_accuracy on cuda: the fit's error and the grid's relative
# Frobenius difference from the table gridder on the same buckets (60 of the 240 dumps: 7.8 M
# visibilities). About 2 minutes on the H100.
# Usage, from the repository root with the bundle unpacked (docs/gpu.md):
#   bash bench/chebyshev_h100.sh OUT_DIR [uvflow command, default /tmp/uvflow-gpu/run uvflow]
# Writes OUT_DIR/chebyshev_h100.md (both tables) and the run reports.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/chebyshev_h100.sh OUT_DIR [uvflow command]}
uvflow=${2:-/tmp/uvflow-gpu/run uvflow}
# The accuracy tool sits beside uvflow: in the bundle, run through the same wrapper.
case $uvflow in
  *" uvflow") accuracy="${uvflow% uvflow} chebyshev_accuracy" ;;
  *) accuracy="$(dirname "$uvflow")/bench/chebyshev_accuracy" ;;
esac
mkdir -p "$out" out
bundle_commit=$(dirname "${uvflow%% *}")/COMMIT
[[ -z ${UVFLOW_COMMIT:-} && -f $bundle_commit ]] && export UVFLOW_COMMIT=$(cat "$bundle_commit")
rm -f "$out"/gpu_el56-82_*.report.json
failed=0
for terms in 0 11 25 50; do
  variant=uvflow name=uvflow
  [[ $terms -gt 0 ]] && variant=chebyshev name=chebyshev$terms
  echo "== el56-82 $name"
  $uvflow run --no-progress bench/gpu_preset.yaml --set vars.preset=el56-82 --set vars.variant=$variant \
    --set vars.tile_v=16 --set vars.npix=15000 --set vars.cell_arcsec=1.45 --set vars.dumps_per_block=60 \
    --set kernels.chebyshev=$terms --report "$out/gpu_el56-82_$name.report.json" 2>&1 |
    grep -E "^(grid|sort|buckets) |Chebyshev|wall|rror"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "failed: $name" >&2; failed=1; }
  rm -f out/gpu_el56-82_$variant.fits
done
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
{
  echo "# Chebyshev-evaluated kernels against the table on the GPU (bench/chebyshev_h100.sh)"
  echo
  echo "Variant chebyshevN: grid.tiled cuda variant chebyshev, kernels.wproj chebyshev: N (in r^2). Its updates are"
  echo "counted as the table's, (2s+1)^2 per visibility (the footprint's corners beyond the fit's disc included)."
  echo
  python3 bench/report_gpu.py --device "$device" "$out"/gpu_el56-82_*.report.json
  echo "## Accuracy: grid.tiled chebyshev against the table gridder on the same buckets (cuda, 60 dumps)"
  echo
  $accuracy cuda 60 11,25,50 r2 2>&1 | grep -vE "^\[.*\] \[(info|warning)\]"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "failed: chebyshev_accuracy" >&2; failed=1; }
} >"$out/chebyshev_h100.md"
cat "$out/chebyshev_h100.md"
exit $failed
