#!/usr/bin/env bash
# Nsight Compute on the gridding and tiling kernels of one EL56-82 run per grid.tiled variant (on
# the GPU machine; docs/gpu.md). Usage: bench/gpu_profile.sh "uvflow command" OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
uvflow=$1 outdir=$2
sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats"
for spec in "uvflow:uvflow_kernel" "nvidia:nvidia_kernel" "uvflow:scatter" "uvflow:count_tiles" "uvflow:plane_keys" "uvflow:extend_box"; do
  variant=${spec%%:*} kernel=${spec#*:}
  tile_v=16
  name=$(echo "$kernel" | tr -c 'a-z_\n' '_' | cut -c1-24)
  timeout 240 ncu --target-processes all -k "regex:$kernel" -c 1 $sections \
    $uvflow run --no-progress bench/gpu_preset.yaml --set vars.variant=$variant --set vars.tile_v=$tile_v \
    --set fits.path=/tmp/p.fits >"$outdir/ncu_$name.txt" 2>&1
  echo "== $kernel ($variant)"
  grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|L1/TEX Hit|L2 Hit|Achieved Occupancy|Compute \(SM\)|Warp Cycles Per Issued|Issued Warp|No Eligible|Registers Per|Theoretical Occ|Block Limit" \
    "$outdir/ncu_$name.txt" | head -24
done
