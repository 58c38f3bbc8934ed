#!/usr/bin/env bash
# grid.tiled (2 threads) against grid.serial (Listing 1) on the EL56-82 data set shape, CPU only.
# Runs pipelines/bench_el56-82.yaml and bench/el56-82_serial.yaml (same simulated data, same
# kernels) and writes bench/results/cpu_gridders.md. Usage: bench/cpu_gridders.sh [uvflow binary]
set -euo pipefail
cd "$(dirname "$0")/.."
uvflow=${1:-build/uvflow}
mkdir -p out
"$uvflow" run --no-progress pipelines/bench_el56-82.yaml | tee out/bench_tiled.txt
"$uvflow" run --no-progress bench/el56-82_serial.yaml | tee out/bench_serial.txt
/usr/bin/python3 bench/report_cpu_gridders.py out/bench_el56-82.report.json out/bench_el56-82_serial.report.json \
  >bench/results/cpu_gridders.md
cat bench/results/cpu_gridders.md
