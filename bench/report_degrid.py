"""The table of bench/h100_degrid.sh from the run reports (JSON) of
pipelines/bench_degrid_el56-82_gpu.yaml, one per degrid.wproj variant: the degridder's device
time, visibilities/s, kernel-point updates/s and the share of the FP32 FMA ceiling (8.1e12
updates/s, as bench/report_gpu.py; the H100 and H200 have the same SMs)."""
import argparse
import datetime
import json
import os
import re
import subprocess

CEILING = 8.1e12  # complex kernel-point updates/s, 4 FP32 FMAs each (as bench/report_gpu.py)
VARIANTS = ["uvflow", "gather", "scatter", "moving_window"]

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="")
ap.add_argument("reports", nargs="+")
args = ap.parse_args()

runs = {}
for path in args.reports:
    m = re.search(r"degrid_el56-82_(\w+)\.report\.json$", path)
    if m:
        runs[m.group(1)] = json.load(open(path))


def stage(r, sid):
    return next((s for s in r["stages"] if s["id"] == sid), None)


commit = os.environ.get("UVFLOW_COMMIT") or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                                           text=True).stdout.strip()
variants = [v for v in VARIANTS if v in runs]
if not variants:
    raise SystemExit("no run reports")
blocks = sorted({stage(runs[v], "degrid")["items_in"] for v in variants})
print("# GPU degridding benchmark\n")
print(f"{datetime.date.today()}, commit {commit or '?'}, {args.device or 'GPU'}; `bench/h100_degrid.sh` "
      "(pipelines/bench_degrid_el56-82_gpu.yaml, one run per variant). Degridding time = the `degrid` stage's "
      f"CUDA-event intervals on its stream, summed over its {' or '.join(map(str, blocks))} block(s) "
      "(for uvflow, scatter and moving_window it "
      "includes their own locality sort, bucketing or baseline grouping; moving_window's also its host-side key "
      "building and upload). Updates = sum "
      "over predicted visibilities of (2s+1)^2; the ceiling is 8.1e12 updates/s (FP32 FMA, 4 FMA per update). "
      "uvflow, gather and scatter read w-sorted blocks, moving_window the raw [dump][baseline] blocks.\n")
print("| | " + " | ".join(variants) + " |")
print("|---|" + "---|" * len(variants))
rows = {v: stage(runs[v], "degrid") for v in variants}
print("| degridding (ms) | " + " | ".join(f"{rows[v]['device_s'] * 1e3:.2f}" for v in variants) + " |")
print("| visibilities predicted | " + " | ".join(f"{rows[v]['visibilities']:,.0f}" for v in variants) + " |")
print("| updates | " + " | ".join(f"{rows[v]['updates']:.4e}" for v in variants) + " |")
print("| **visibilities/s** | " + " | ".join(
    f"{rows[v]['visibilities'] / rows[v]['device_s'] / 1e6:.0f} M" for v in variants) + " |")
print("| **updates/s** | " + " | ".join(f"{rows[v]['updates'] / rows[v]['device_s']:.3e}" for v in variants) + " |")
print("| **% of FP32 FMA ceiling** | " + " | ".join(
    f"{100 * rows[v]['updates'] / rows[v]['device_s'] / CEILING:.1f} %" for v in variants) + " |")
if "gather" in rows:
    print("| speed vs gather | " + " | ".join(
        f"{rows['gather']['device_s'] / rows[v]['device_s']:.2f}x" for v in variants) + " |")
for sid, name in [("sort2", "w-sort of the degridded blocks (ms)"), ("model", "fft.image_to_grid (ms)"),
                  ("grid", "forward gridding for the model (ms)")]:
    print(f"| {name} | " + " | ".join(
        f"{stage(runs[v], sid)['device_s'] * 1e3:.2f}" if stage(runs[v], sid) else "-" for v in variants) + " |")
print("| whole run (s) | " + " | ".join(f"{runs[v]['wall_s']:.2f}" for v in variants) + " |")
