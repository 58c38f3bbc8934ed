#!/usr/bin/env bash
# The GPU benchmark (docs/gpu.md says how to run it on the H100): the presets synthetic, el30-56,
# el56-82 and el82-70 through bench/gpu_preset.yaml with each grid.tiled variant (uvflow, nvidia,
# nag) in separate runs, then pipelines/bench_el56-82_gpu.yaml end to end, then the tables.
# Usage: bench/gpu_presets.sh [uvflow command] [output.md]
set -uo pipefail
cd "$(dirname "$0")/.."
uvflow=${1:-build/uvflow}
out=${2:-bench/results/h100_steps.md}  # h100.md holds its 2026-11-22 tables below the variants table
mkdir -p out
# Reports of an earlier run must not stand in for a run of this one that failed.
rm -f out/gpu_*.report.json out/bench_el56-82_gpu.report.json
failed=0
# The bundle of scripts/gpu_bundle.sh records the commit it was built from.
bundle_commit=$(dirname "${uvflow%% *}")/COMMIT
[[ -z ${UVFLOW_COMMIT:-} && -f $bundle_commit ]] && export UVFLOW_COMMIT=$(cat "$bundle_commit")
declare -A npix=([synthetic]=8332 [el30-56]=15000 [el56-82]=15000 [el82-70]=15000)
declare -A cell=([synthetic]=20 [el30-56]=1.45 [el56-82]=1.45 [el82-70]=1.45)
declare -A dpb=([synthetic]=100 [el30-56]=60 [el56-82]=60 [el82-70]=60)
for preset in synthetic el30-56 el56-82 el82-70; do
  for variant in uvflow nvidia nag; do
    tile_v=16  # uvflow and nvidia; nag's design is 32 x 32
    [[ $variant == nag ]] && tile_v=32
    echo "== $preset $variant"
    $uvflow run --no-progress bench/gpu_preset.yaml --set vars.preset=$preset --set vars.variant=$variant \
      --set vars.tile_v=$tile_v --set vars.npix=${npix[$preset]} --set vars.cell_arcsec=${cell[$preset]} \
      --set vars.dumps_per_block=${dpb[$preset]} 2>&1 | grep -E "^(grid|sort|buckets|image) |wall|error"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "failed: $preset $variant" >&2; failed=1; }
    rm -f out/gpu_${preset}_${variant}.fits
  done
done
echo "== end to end"
$uvflow run --no-progress pipelines/bench_el56-82_gpu.yaml 2>&1 | tail -20
[[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "failed: end to end" >&2; failed=1; }
[[ $failed -eq 0 ]] || { echo "some runs failed: no table written" >&2; exit 1; }
rm -f out/bench_el56-82_gpu.fits
python3 bench/report_gpu.py --device "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" \
  out/gpu_*.report.json out/bench_el56-82_gpu.report.json >"$out"
cat "$out"
