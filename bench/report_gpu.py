"""Tables of bench/gpu_presets.sh from the run reports (JSON): per preset and grid.tiled variant,
the device time of every step (like Tables 3 and 4 of the NAG memo), visibilities/s, kernel-point
updates/s and the share of the H100's FP32 FMA ceiling; then the end-to-end run."""
import argparse
import datetime
import json
import os
import re
import subprocess

# Complex kernel-point updates/s (4 FP32 FMAs each). The H100 SXM's theoretical rate is 132 SMs x
# 128 FMA/clock x 1.98 GHz / 4 = 8.36e12; bench/fma_peak.cu sustains 7.64e12 (bench/results/fma_peak.md).
# 8.1e12 lies between: the fractions of it in the tables are within 6 % of either.
CEILING = 8.1e12
STEPS = [("upload (visibilities)", "vis.vis.to_device"), ("upload (kernels)", "kernels.kernels.to_device"),
         ("w-sort and placement", "sort"), ("bounding box", "box"), ("count points in tiles", "count"),
         ("bucket sort", "buckets"), ("gridding", "grid"), ("FFT", "image"), ("grid correction", "corr"),
         ("download (image)", "corr.image.to_host")]

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="")
ap.add_argument("reports", nargs="+")
args = ap.parse_args()

runs, e2e = {}, None
for path in args.reports:
    r = json.load(open(path))
    if r["pipeline"] == "bench_el56-82_gpu":
        e2e = r
        continue
    m = re.search(r"gpu_(.+)_(uvflow|nvidia|nag|chebyshev\d+)\.report\.json$", path)
    if m:
        runs.setdefault(m.group(1), {})[m.group(2)] = r


def stage(r, sid):
    return next((s for s in r["stages"] if s["id"] == sid), None)


def ms(s):
    return s["device_s"] * 1e3 if s and s["backend"] == "cuda" else (s["wall_s"] * 1e3 if s else float("nan"))


# The commit the binaries were built from: scripts/gpu_bundle.sh records it in the bundle (the GPU
# machine's copy of the tree may have no usable git history).
commit = os.environ.get("UVFLOW_COMMIT") or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                                           text=True).stdout.strip()
print("# GPU gridding benchmark on the H100\n")
print(f"{datetime.date.today()}, commit {commit or '?'}, {args.device or 'GPU'}; `bench/gpu_presets.sh`. Device times "
      "are CUDA-event intervals around each stage's work on its own stream, summed over blocks. Updates = sum over "
      "gridded visibilities of (2s+1)^2; the ceiling is 8.1e12 updates/s (FP32 FMA, 4 FMA per update). "
      "With up to 4 blocks in flight these intervals overlap other stages' work on other streams and include any host time between a stage's first and last enqueue (such as a first cuFFT plan), so steps that run the same code for every variant (upload, bounding box, correction) still differ between columns: the gridding row is the comparison this table is for.\n")
for preset in ["synthetic", "el30-56", "el56-82", "el82-70"]:
    if preset not in runs:
        continue
    # chebyshevN: grid.tiled variant chebyshev with N coefficients (bench/chebyshev_h100.sh).
    chebyshev = sorted((v for v in runs[preset] if v.startswith("chebyshev")), key=lambda v: int(v[9:]))
    variants = [v for v in ["uvflow", "nvidia", "nag"] if v in runs[preset]] + chebyshev
    ref = runs[preset][variants[0]]
    g = stage(ref, "grid")
    nvis, upd = g["visibilities"], g["updates"]
    print(f"## {preset}: {nvis:,.0f} visibilities gridded, {upd:.3e} updates\n")
    print("| step (ms) | " + " | ".join(variants) + " |")
    print("|---|" + "---|" * len(variants))
    for name, sid in STEPS:
        print(f"| {name} | " + " | ".join(f"{ms(stage(runs[preset][v], sid)):.2f}" for v in variants) + " |")
    print("| **gridding: visibilities/s** | " + " | ".join(
        f"{nvis / stage(runs[preset][v], 'grid')['device_s'] / 1e6:.0f} M" for v in variants) + " |")
    print("| **gridding: updates/s** | " + " | ".join(
        f"{upd / stage(runs[preset][v], 'grid')['device_s']:.3e}" for v in variants) + " |")
    print("| **% of FP32 FMA ceiling** | " + " | ".join(
        f"{100 * upd / stage(runs[preset][v], 'grid')['device_s'] / CEILING:.1f} %" for v in variants) + " |")
    if "uvflow" in runs[preset] and "nvidia" in runs[preset]:
        sp = stage(runs[preset]["nvidia"], "grid")["device_s"] / stage(runs[preset]["uvflow"], "grid")["device_s"]
        print(f"\nuvflow grids {sp:.2f}x faster than nvidia on {preset}.")
    print()
if e2e:
    up = stage(e2e, "vis.vis.to_device")
    down = stage(e2e, "corr.image.to_host")
    window = down["last_output_s"] - e2e["stream_start_s"]
    h2d = sum(s["bytes_h2d"] for s in e2e["stages"])
    d2h = sum(s["bytes_d2h"] for s in e2e["stages"])
    print("## End to end: pipelines/bench_el56-82_gpu.yaml\n")
    print(f"From the start of streaming (visibilities in pinned host memory, kernel stack made) to the "
          f"15000^2 image in host memory: **{window * 1e3:.1f} ms**. Whole run (simulation, kernels, FITS writing "
          f"included): {e2e['wall_s']:.2f} s.\n")
    print(f"Transfers: {up['items_in']} uploads of visibility blocks, "
          f"{stage(e2e, 'kernels.kernels.to_device')['items_in']} of the kernel stack, {down['items_in']} download; "
          f"{h2d / 1e6:.1f} MB host->device, {d2h / 1e6:.1f} MB device->host.\n")
    print("| stage | backend | items | device ms | wall ms |")
    print("|---|---|---|---|---|")
    for s in e2e["stages"]:
        print(f"| {s['id']} | {s['backend']} | {s['items_in']} | {s['device_s'] * 1e3:.2f} | {s['wall_s'] * 1e3:.2f} |")
