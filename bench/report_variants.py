"""The table of bench/h100_variants.sh from its run reports and agreement.txt: per data set, every
gridder side by side (gridding ms, visibilities/s, useful kernel-point updates/s and the share of
the H100's FP32 FMA ceiling, and the grid's relative Frobenius difference from grid.serial's)."""
import argparse
import datetime
import glob
import json
import os
import re

CEILING = 8.1e12  # as bench/report_gpu.py: complex updates/s, 4 FP32 FMAs each
SETS = ["synthetic", "el30-56", "el56-82", "el82-70", "file"]
VARIANTS = [("serial", "grid.serial (cpu, 1 thread, sums in double)"), ("nag", "nag"), ("nvidia", "nvidia"),
            ("moving_window", "moving_window (10 dumps)"), ("uvflow", "uvflow"),
            ("atomic_uvflow", "grid.atomic uvflow (groups, one atomic per point)"),
            ("atomic_uvflow_double", "grid.atomic uvflow, accumulate: double"),
            ("chebyshev", "chebyshev (25 terms, r^2)")]
GRID_STAGE = {"serial": "serial", "moving_window": "window"}
WHY_ABSENT = {("file", "chebyshev"): "the file's kernels are tables; kernels.wproj makes the fit",
              ("file", "moving_window"): "the memos' format has no antenna or time labels"}

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="")
ap.add_argument("dir")
args = ap.parse_args()

runs = {}
for path in glob.glob(os.path.join(args.dir, "variant_*.report.json")):
    m = re.search(r"variant_(.+?)_(serial|nag|nvidia|moving_window|uvflow|atomic_uvflow|atomic_uvflow_double|chebyshev)\.report\.json$", path)
    if m:
        runs.setdefault(m.group(1), {})[m.group(2)] = json.load(open(path))
agreement = {}
if os.path.exists(os.path.join(args.dir, "agreement.txt")):
    for line in open(os.path.join(args.dir, "agreement.txt")):
        s, v, x = line.split()
        agreement[(s, v)] = float(x)


def grid_stage(r, v):
    return next(s for s in r["stages"] if s["id"] == GRID_STAGE.get(v, "grid"))


commit = os.environ.get("UVFLOW_COMMIT", "?")
print(f"# Every gridder against the cpu serial reference on the {args.device or 'GPU'}\n")
print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit}, {args.device or 'GPU'}; "
      "`bench/h100_variants.sh` (bench/variant_grid.yaml, each gridder in its own run, the grid written as .npy). "
      "Gridding ms: the gridder stage's device time (CUDA events around its calls, summed over the blocks; "
      "grid.serial: its host time). Updates: the useful kernel-point updates, sum over gridded visibilities of "
      "(2s+1)^2, as grid.serial counts them on the same data; the ceiling 8.1e12 updates/s (FP32 FMA, 4 per "
      "update). Agreement: relative Frobenius norm of the grid's difference from grid.serial's, Listing 1 with "
      "its products and sums in double (accumulate: double), rounded to float once. "
      "`file`: the el56-82 preset written in the gridding memos' format by io.write_seeds and read by "
      "io.read_seeds (its own kernels, as given).\n")
for s in SETS:
    if s not in runs or "serial" not in runs[s]:
        continue
    ref = grid_stage(runs[s]["serial"], "serial")
    nvis, upd = ref["visibilities"], ref["updates"]
    print(f"## {s}: {nvis:,.0f} visibilities gridded, {upd:.3e} updates\n")
    print("| gridder | gridding ms | visibilities/s | updates/s | % of FP32 FMA ceiling | agreement with serial |")
    print("|---|---|---|---|---|---|")
    for v, name in VARIANTS:
        if v not in runs[s]:
            why = WHY_ABSENT.get((s, v), "not run")
            print(f"| {name} | n/a: {why} | | | | |")
            continue
        g = grid_stage(runs[s][v], v)
        t = g["wall_s"] if v == "serial" else g["device_s"]
        agree = "(the reference)" if v == "serial" else (f"{agreement[(s, v)]:.2e}" if (s, v) in agreement else "?")
        print(f"| {name} | {t * 1e3:.1f} | {g['visibilities'] / t / 1e6:.3g} M | {upd / t:.3e} | "
              f"{100 * upd / t / CEILING:.2f} % | {agree} |")
    print()
