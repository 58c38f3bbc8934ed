#!/usr/bin/env bash
# CPU benchmark of the StrayLight frame pipeline (bench/straylight_cpu.yaml: simulated 813 x 5271
# frames -> column gain -> PSF convolution, nothing written), run through `uvflow run` for PSF
# sizes 15, 63 and 255 and methods direct, fft and auto. Prints a Markdown table:
#   convolve ms/frame  host time inside image.psf_convolve per frame (the run report's wall_s of the stage)
#   pipeline ms/frame  the whole run's wall time per frame (simulation and gain included)
#   CPU ms/frame       the whole run's user + system CPU time per frame: on 2 cores, wall time
#                      cannot be below half of it, and it is less disturbed by other load
# Direct at 255 x 255 takes seconds per frame, so it runs on DIRECT_255_FRAMES frames only. Each
# fft or auto configuration first runs 2 frames so that FFTW's plans are measured into the wisdom
# file (as any later run of the pipeline finds them) and planning is not timed.
#
# usage: bench/straylight_cpu.sh [BUILD_DIR] [FRAMES]     (defaults: build, 200)
#        PSF_SIZES="63 255" METHODS=fft bench/straylight_cpu.sh ...   (a subset)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
frames=${2:-200}
direct_255_frames=${DIRECT_255_FRAMES:-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run FRAMES PSF METHOD: one pipeline run in $tmp (its wisdom file lives there), report in $tmp.
run() {
  (cd "$tmp" && /usr/bin/time -f "%U %S" -o "$tmp/time" "$build/uvflow" run "$root/bench/straylight_cpu.yaml" \
    --set frames.count="$1" --set psf.size_x="$2" --set psf.size_y="$2" --set convolve.method="$3" \
    --set run.report="$tmp/report.json" > "$tmp/log" 2>&1) || { cat "$tmp/log" >&2; exit 1; }
}

echo "| PSF | method | frames | convolve ms/frame | pipeline ms/frame | CPU ms/frame | method used |"
echo "|---|---|---|---|---|---|---|"
for psf in ${PSF_SIZES:-15 63 255}; do
  for method in ${METHODS:-direct fft auto}; do
    n=$frames
    if [[ $psf == 255 && $method == direct ]]; then n=$((frames < direct_255_frames ? frames : direct_255_frames)); fi
    if [[ $method != direct ]]; then run 2 "$psf" "$method"; fi
    run "$n" "$psf" "$method"
    used=$(grep -o "'convolve': method [a-z]*" "$tmp/log" | awk '{print $3}' || true)
    used=${used:-?}
    cpu=$(awk '{print $1 + $2}' "$tmp/time")
    jq -r --arg psf "$psf" --arg method "$method" --arg used "$used" --argjson cpu "$cpu" '
      (.stages[] | select(.id == "convolve")) as $c
      | "| \($psf) x \($psf) | \($method) | \($c.items_in) | \($c.wall_s * 1000 / $c.items_in | . * 10 | round / 10)"
        + " | \(.wall_s * 1000 / $c.items_in | . * 10 | round / 10)"
        + " | \($cpu * 1000 / $c.items_in | . * 10 | round / 10) | \($used) |"' "$tmp/report.json"
  done
done
