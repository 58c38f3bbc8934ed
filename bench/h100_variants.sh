#!/usr/bin/env bash
# Every GPU gridder side by side against the cpu serial reference (issue 13): for the presets
# synthetic, el30-56, el56-82 and el82-70 and for the el56-82 preset written in the gridding memos'
# format and read back by io.read_seeds, bench/variant_grid.yaml with grid.serial (cpu, Listing 1,
# sums in double), then grid.tiled's nag, nvidia, uvflow and chebyshev (25 terms in r^2) variants,
# grid.atomic's uvflow variant with float and with double sums, and grid.moving_window (10 dumps)
# on cuda, each in its own run (VARIANTS set: those only); each grid written as .npy and compared
# with the serial one (relative Frobenius norm of the difference), then deleted (a 18750^2 grid is
# 2.8 GB). The serial runs (one thread each, minutes on the el presets) start first, all data sets
# at once in the background, so that they overlap the GPU runs; a data set's comparisons wait for
# its own. The file's data set has no chebyshev row (its kernels are tables; the fit is made by
# kernels.wproj) and no moving_window row (the format has no antenna or time labels).
# Then bench/report_variants.py's table. Usage, on the H100 from the repository root with the bundle
# unpacked (docs/gpu.md):
#   bash bench/h100_variants.sh OUT_DIR [uvflow command, default /tmp/uvflow-gpu/run uvflow] [data sets]
# Writes OUT_DIR/h100_variants.md, the run reports and OUT_DIR/agreement.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/h100_variants.sh OUT_DIR [uvflow command] [data sets]}
uvflow=${2:-/tmp/uvflow-gpu/run uvflow}
sets=${3:-synthetic el30-56 el56-82 el82-70 file}
mkdir -p "$out" out
rm -f "$out/agreement.txt"
bundle_commit=$(dirname "${uvflow%% *}")/COMMIT
[[ -z ${UVFLOW_COMMIT:-} && -f $bundle_commit ]] && export UVFLOW_COMMIT=$(cat "$bundle_commit")
declare -A npix=([synthetic]=8332 [el30-56]=15000 [el56-82]=15000 [el82-70]=15000 [file]=15000)
declare -A cell=([synthetic]=20 [el30-56]=1.45 [el56-82]=1.45 [el82-70]=1.45 [file]=1.45)
declare -A dpb=([synthetic]=100 [el30-56]=60 [el56-82]=60 [el82-70]=60 [file]=60)
failed=0
# One run of bench/variant_grid.yaml: data set, variant, grid path, then its extra --set arguments.
grid_run() {
  local set=$1 v=$2 grid=$3
  shift 3
  local source=(--set vars.source=simulate --set vars.preset=$set)
  [[ $set == file ]] && source=(--set vars.source=seeds --set vars.file=/tmp/el56-82.seeds)
  $uvflow run --no-progress bench/variant_grid.yaml "${source[@]}" "$@" --set vars.npix=${npix[$set]} \
    --set vars.cell_arcsec=${cell[$set]} --set vars.dumps_per_block=${dpb[$set]} --set vars.grid_path=$grid \
    --report "$out/variant_${set}_$v.report.json" 2>&1 | grep -E "^(grid|serial|window|sort|buckets) |wall|rror"
  return ${PIPESTATUS[0]}
}
all_variants=${VARIANTS:-serial nag nvidia uvflow atomic_uvflow atomic_uvflow_double chebyshev moving_window}
declare -A serial_pid=()
if [[ " $sets " == *" file "* ]]; then
  $uvflow run -q bench/write_seeds_file.yaml --set vars.path=/tmp/el56-82.seeds || { echo "failed: writing the file" >&2; failed=1; }
fi
if [[ " $all_variants " == *" serial "* ]]; then
  for set in $sets; do
    grid_run $set serial /tmp/variant_serial_$set.npy --set vars.gridder=serial >"$out/serial_$set.log" &
    serial_pid[$set]=$!
  done
fi
for set in $sets; do
  variants=$all_variants
  [[ $set == file ]] && variants=$(echo " $all_variants " | sed 's/ chebyshev / /; s/ moving_window / /')
  for v in $variants; do
    [[ $v == serial ]] && continue
    args=(--set vars.gridder=tiled --set vars.variant=$v --set vars.tile_v=16)
    case $v in
      moving_window) args=(--set vars.gridder=$v) ;;
      atomic_uvflow) args=(--set vars.gridder=atomic --set vars.variant=uvflow) ;;
      atomic_uvflow_double) args=(--set vars.gridder=atomic --set vars.variant=uvflow --set vars.accumulate=double) ;;
      nag) args+=(--set vars.tile_v=32) ;;
      chebyshev) args+=(--set kernels.chebyshev=25) ;;
    esac
    echo "== $set $v"
    grid=/tmp/variant_$v.npy
    grid_run $set $v $grid "${args[@]}" || { echo "failed: $set $v" >&2; failed=1; continue; }
    if [[ -n ${serial_pid[$set]:-} ]]; then
      echo "== $set serial"
      wait ${serial_pid[$set]} || { echo "failed: $set serial" >&2; failed=1; }
      cat "$out/serial_$set.log"
      serial_pid[$set]=
    fi
    if [[ -f /tmp/variant_serial_$set.npy ]]; then
      python3 -c '
import sys, numpy as np
ref = np.load(sys.argv[1], mmap_mode="r"); g = np.load(sys.argv[2], mmap_mode="r")
num = den = 0.0
for r in range(0, ref.shape[0], 1024):  # in row bands: two 2.8 GB grids and no copies of them
    a = np.asarray(ref[r:r + 1024], np.complex128); b = np.asarray(g[r:r + 1024], np.complex128)
    num += float(np.sum(np.abs(b - a) ** 2)); den += float(np.sum(np.abs(a) ** 2))
print(sys.argv[3], sys.argv[4], (num / den) ** 0.5)' /tmp/variant_serial_$set.npy $grid $set $v | tee -a "$out/agreement.txt"
    fi
    rm -f $grid
  done
  [[ -n ${serial_pid[$set]:-} ]] && { wait ${serial_pid[$set]} || failed=1; cat "$out/serial_$set.log"; }
  rm -f /tmp/variant_serial_$set.npy
done
rm -f /tmp/el56-82.seeds
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
python3 bench/report_variants.py --device "$device" "$out" >"$out/h100_variants.md"
cat "$out/h100_variants.md"
exit $failed
