#!/usr/bin/env bash
# GPU benchmark of the StrayLight frame pipeline (bench/straylight_gpu.yaml: 813 x 5271 frames made
# before the run in pinned memory -> upload -> column gain and PSF convolution on the device ->
# download into bench.drop_frames, nothing written), through `uvflow run`, for PSF sizes 15, 63 and
# 255 and cuda methods direct, fft and auto. Prints a Markdown table:
#   convolve ms/frame   device time of image.psf_convolve per frame: CUDA events around each
#                       frame's work on its stream (the run report's device_s), frames device-resident.
#                       An interval, so an upper bound: with frames in flight it also holds other
#                       stages' work that ran between the two events
#   gain ms/frame       the same for image.column_gain (also an upper bound)
#   H->D, D->H ms/frame device time of the inserted upload and download per frame
#   frames/s steady     frames 2..N over the time between the first and the last frame arriving on
#                       the host (bench.drop_frames): the end-to-end rate with both transfers,
#                       once the pipeline is full
#   frames/s stream     all N frames from the start of the stream to the last arrival: adds the
#                       first frame's setup (cuFFT plans, PSF spectrum) and the pipeline's fill
# Excluded from both rates: process start, pinning the reserve, mapping the device pool and making
# the 8 distinct frames (the same 8 are sent again and again, so host memory is not the limit).
#
# usage: bench/straylight_gpu.sh [UVFLOW] [PLUGIN_DIR] [FRAMES]
#   UVFLOW      the uvflow command (default build/uvflow; with the bundle of docs/gpu.md on the lent
#               H100: "/tmp/uvflow-gpu/run uvflow")
#   PLUGIN_DIR  a folder with bench_sinks.so; default: built here with cmake from
#               bench/sinks into $BUILD/bench_sinks (BUILD defaults to build)
#   FRAMES      frames per run (default 200)
#   PSF_SIZES="63 255" METHODS=fft bench/straylight_gpu.sh ...   (a subset)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
uvflow=${1:-$root/build/uvflow}
plugins=${2:-}
frames=${3:-200}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [[ -z $plugins ]]; then
  build=$(cd "${BUILD:-$root/build}" && pwd)
  cmake -S "$root/bench/sinks" -B "$build/bench_sinks" -DCMAKE_BUILD_TYPE=Release -Duvflow_DIR="$build" >/dev/null
  cmake --build "$build/bench_sinks" >/dev/null
  plugins=$build/bench_sinks
fi
plugins=$(cd "$plugins" && pwd)

echo "| PSF | method | method used | frames | convolve ms/frame | gain ms/frame | H->D ms/frame | D->H ms/frame | frames/s steady | frames/s stream |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for psf in ${PSF_SIZES:-15 63 255}; do
  for method in ${METHODS:-direct fft auto}; do
    # $uvflow unquoted: it may be a command with arguments (the bundle's run wrapper).
    if ! (cd "$tmp" && $uvflow run --no-progress "$root/bench/straylight_gpu.yaml" --plugin-path "$plugins" \
      --set frames.count="$frames" --set psf.size_x="$psf" --set psf.size_y="$psf" --set convolve.method="$method" \
      --set run.report="$tmp/report.json" >"$tmp/log" 2>&1); then
      cat "$tmp/log" >&2
      exit 1
    fi
    used=$(grep -o "'convolve': method [a-z]*" "$tmp/log" | awk '{print $3}' || true)
    used=${used:-?}
    python3 - "$tmp/report.json" "$psf" "$method" "$used" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
psf, method, used = sys.argv[2:5]
by_id = {s["id"]: s for s in r["stages"]}
by_type = {s["type"]: s for s in r["stages"]}
conv, gain, drop = by_id["convolve"], by_id["gain"], by_id["drop"]
up, down = by_type["transfer.to_device"], by_type["transfer.to_host"]
n = conv["items_in"]
ms = lambda s: f'{s["device_s"] * 1e3 / s["items_in"]:.3f}'
steady = (drop["items_in"] - 1) / (drop["busy_to_s"] - drop["busy_from_s"])
stream = drop["items_in"] / (drop["busy_to_s"] - r["stream_start_s"])
print(f"| {psf} x {psf} | {method} | {used} | {n} | {ms(conv)} | {ms(gain)} | {ms(up)} | {ms(down)} | {steady:.0f} | {stream:.0f} |")
PY
  done
done
echo
echo "device: $(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["device"])' "$tmp/report.json")"
