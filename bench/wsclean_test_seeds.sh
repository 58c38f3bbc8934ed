#!/usr/bin/env bash
# tests/wsclean_test over many skies: the fixed sky once, then RandomSkyAndFlags replayed for
# UVFLOW_TEST_SEED = 1..N and 1214170669 (the sky that once exceeded 0.5 %). Writes
# bench/results/wsclean_test_seeds.md: each sky's worst source peak error against WSClean's wgridder
# (uniform, and Briggs with the sky's random robust), and whether any test failed.
# Usage: bench/wsclean_test_seeds.sh [build dir, default build] [N, default 40]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
n=${2:-40}
test=$build/tests/wsclean_test
out=bench/results/wsclean_test_seeds.md
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=0
"$test" --gtest_filter='*FixedSky*' >"$log" 2>&1 || failed=$((failed + 1))
fixed=$(grep -E "^\[(natural|uniform|briggs)" "$log" | sed -E 's/ worst peak error vs wgridder ([0-9.]+) %.*/: \1 %/')
rows="" all=""
for seed in 1214170669 $(seq 1 "$n"); do
  UVFLOW_TEST_SEED=$seed "$test" --gtest_filter='*RandomSky*' >"$log" 2>&1 || failed=$((failed + 1))
  uniform=$(sed -nE 's/^\[uniform\] worst peak error vs wgridder ([0-9.]+) %.*/\1/p' "$log")
  briggs=$(sed -nE 's/^\[briggs ([-0-9.]+)\] worst peak error vs wgridder ([0-9.]+) %.*/\1 \2/p' "$log")
  ties=$(grep -c "brighter" "$log" || true)
  rows+="| $seed | $uniform | ${briggs% *} | ${briggs#* } | $ties |"$'\n'
  all+="$uniform"$'\n'"${briggs#* }"$'\n'
done
all=$(printf '%s' "$all" | sort -g)
count=$(echo "$all" | wc -l)
{
  echo "# tests/wsclean_test over $((n + 1)) random skies"
  echo
  echo "$(date -u +%F), commit $(git rev-parse --short HEAD), $(nproc)-core $(uname -n); \`bench/wsclean_test_seeds.sh\`."
  echo "Worst source peak error against \`wsclean -use-wgridder -niter 0\` per image; near ties: sources whose peak"
  echo "uvflow puts on another pixel than WSClean (allowed only within 0.5 % of WSClean's peak). Failed tests: $failed."
  echo
  echo "Fixed sky: $(echo "$fixed" | paste -sd ';' | sed 's/;/; /g')"
  echo
  echo "Random skies, $count images: median $(echo "$all" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') %, max $(echo "$all" | tail -1) %."
  echo
  echo "| seed | uniform (%) | Briggs robust | Briggs (%) | near ties |"
  echo "|---|---|---|---|---|"
  printf '%s' "$rows"
} >"$out"
echo "wrote $out (failed tests: $failed)"
