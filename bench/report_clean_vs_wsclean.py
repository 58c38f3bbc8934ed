"""Writes bench/results/clean_vs_wsclean.md from bench/clean_vs_wsclean.sh's work folder: wall times
(every repeat, and the median), the major cycles and components of each, the restored peaks at the
sources' pixels and the beams. Usage: report_clean_vs_wsclean.py WORK CHANNELS"""
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys

import numpy as np
from fits_numpy import read_fits  # bench/fits_numpy.py (astropy is not installed everywhere)

work, channels = sys.argv[1], int(sys.argv[2])
SOURCES = [(216, 281, 3.0), (316, 226, 2.0), (266, 346, 1.0), (136, 156, 0.5), (406, 396, 1.5)]

times = [line.split() for line in open(f"{work}/times.txt")]
uv = [float(t[1]) for t in times]
ws = [float(t[2]) for t in times]
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout
uh, uimg = read_fits(f"{work}/uvflow-image.fits")
wh, wimg = read_fits(f"{work}/wsclean-image.fits")
_, ures = read_fits(f"{work}/uvflow-residual.fits")
_, wres = read_fits(f"{work}/wsclean-residual.fits")
report = json.load(open(f"{work}/uvflow.report.json"))
loops = report.get("loops", [])
cycles = len(loops[0]["cycles"]) if loops else "?"
comps = sum(c["minor_iterations"] for c in loops[0]["cycles"]) if loops else "?"
log = open(f"{work}/wsclean.log").read()
ws_cycles = re.search(r"(\d+) major iterations were performed", log)
ws_comps = re.findall(r"Performed (\d+) iterations in total", log)
vis = 783360 * channels

print("# uvflow ms_clean_image against WSClean: wall time and results\n")
print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}: a 2-core shared VM "
      f"(load average {os.getloadavg()[0]:.2f} when reported: times are indicative), commit {commit}{' + uncommitted changes' if dirty else ''}.")
print(f"`bench/clean_vs_wsclean.sh`: the small preset, {channels} channel(s), {vis:,} visibilities, 512 x 512 "
      "pixels of 100 arcsec, Briggs 0, gain 0.1, mgain 0.8, threshold 10 mJy, `-use-wgridder -no-small-inversion`; "
      "uvflow on 2 TBB threads, WSClean with `-j 2`. Wall time of the whole command (reading the MS, PSF, "
      "major cycles, restoring, writing; uvflow's kernels.wproj keeps its kernel stacks in a disk cache between runs), "
      "alternating, each repeat:\n")
print("| repeat | uvflow (s) | WSClean (s) |\n|---|---|---|")
for t in times:
    print(f"| {t[0]} | {float(t[1]):.2f} | {float(t[2]):.2f} |")
print(f"| median | {statistics.median(uv):.2f} | {statistics.median(ws):.2f} |\n")
print(f"Major cycles: uvflow {cycles}, WSClean {ws_cycles.group(1) if ws_cycles else '?'}; components: uvflow "
      f"{comps}, WSClean {ws_comps[-1] if ws_comps else '?'}.\n")
print("| source pixel | true flux (Jy) | uvflow restored (Jy/beam) | WSClean restored (Jy/beam) | difference |")
print("|---|---|---|---|---|")
for x, y, f in SOURCES:
    a, b = uimg[y, x], wimg[y, x]
    print(f"| ({x}, {y}) | {f} | {a:.5f} | {b:.5f} | {100 * (a / b - 1):+.3f} % |")
rms = lambda a: float(np.sqrt(np.mean(a * a)))
print(f"\nResidual RMS: uvflow {1e3 * rms(ures):.4f} mJy/beam, WSClean {1e3 * rms(wres):.4f} mJy/beam. "
      f"Beam: uvflow {3600 * float(uh['BMAJ']):.1f} x {3600 * float(uh['BMIN']):.1f} arcsec at {float(uh['BPA']):.2f} deg, "
      f"WSClean {3600 * float(wh['BMAJ']):.1f} x {3600 * float(wh['BMIN']):.1f} arcsec at {float(wh['BPA']):.2f} deg.")
