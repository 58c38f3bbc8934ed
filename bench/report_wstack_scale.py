"""The table of bench/wstack_scale.sh from its run reports: per visibility count, grid.wstack's
device time (CUDA events around its calls: the per-block staging and the end-of-stream pass with
every plane's FFTs), visibilities/s and W^3 updates/s from it, the time from the last block's upload
to the image (the pass alone), and the whole stream from the first upload (the bus included)."""
import argparse
import collections
import datetime
import json
import os
import subprocess

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="")
ap.add_argument("reports", nargs="+")
args = ap.parse_args()


def ms(rs, key):
    return ", ".join(f"{x[key] * 1e3:.0f}" for x in rs)


rows = collections.defaultdict(list)
for path in args.reports:
    r = json.load(open(path))
    st = {s["id"]: s for s in r["stages"]}
    up, w = st["vis.vis.to_device"], st["wstack"]
    rows[w["visibilities"]].append({
        "stage": w["device_s"], "after": w["device_to_s"] - up["device_to_s"],
        "stream": w["device_to_s"] - up["device_from_s"], "upload": up["device_to_s"] - up["device_from_s"],
        "updates": w["updates"], "gb": up["bytes_h2d"] / 1e9})

commit = os.environ.get("UVFLOW_COMMIT") or subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                                                           text=True).stdout.strip()
print(f"{datetime.date.today()}, commit {commit}, {args.device or 'GPU'}; `bench/wstack_scale.sh` "
      "(bench/wstack_scale.yaml: el56-82, 8192^2 image of 2 arcsec, epsilon 1e-4, padding 2, one pass, device pool "
      "reserved before the stream). Runs of each count listed in order.\n")
print("| visibilities | grid.wstack device ms | visibilities/s | updates/s | last upload to image, ms | "
      "first upload to image, ms (upload GB, ms) |")
print("|---|---|---|---|---|---|")
for n in sorted(rows):
    rs = rows[n]
    best = min(x["stage"] for x in rs)
    print(f"| {n / 1e6:,.1f} M | {ms(rs, 'stage')} | {n / best / 1e6:,.0f} M | {rs[0]['updates'] / best:.2e} | "
          f"{ms(rs, 'after')} | {ms(rs, 'stream')} ({rs[0]['gb']:.1f}, {ms(rs, 'upload')}) |")
