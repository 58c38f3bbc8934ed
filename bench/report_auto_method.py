#!/usr/bin/env python3
"""The table of bench/auto_method.sh: per case, what `choose: auto` picked (with the kernel cache
cold and warm), each option's estimate, and the measured wall time of a run with each option."""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys


def estimates(line):
    """{option: seconds or None (passed over)} and the pick, from `uvflow plan`'s why line."""
    picked = re.search(r"auto picked (\w+)", line)
    out = {}
    for m in re.finditer(r"(?:^|; )(\w+): (estimated ([0-9.e+-]+) s|passed over)", line.replace("auto picked", "")):
        out[m.group(1)] = float(m.group(3)) if m.group(3) else None
    return (picked.group(1) if picked else "?"), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--device", default="")
    a = ap.parse_args()
    commit = os.environ.get("UVFLOW_COMMIT") or subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
    print("# `choose: auto` against runs of both methods\n")
    print(f"{datetime.date.today()}, commit {commit}, backend {a.backend}"
          + (f", {a.device}" if a.device else "") + "; `bench/auto_method.sh` (bench/auto_method.yaml, epsilon 1e-2,"
          " both methods at their automatic settings for it).\n")
    print("Each pick is checked against runs of both methods with the same kernel cache: cold (wproj's first"
          " run generates its kernels) and warm (wproj run again). Run s: the whole run's wall time (the same"
          " simulated source in each); option s: the option's stages (device time on cuda).\n")
    print("| case | cache | auto picked | estimated s wproj / wstack | run s wproj / wstack "
          "| option s wproj / wstack | faster | auto right |")
    print("|---|---|---|---|---|---|---|---|")
    checked = right_count = 0
    for name in ["el56-82", "el30-56", "el82-70", "wide_150MHz"]:
        for when, wproj_run in [("before", "wproj"), ("after", "wproj_warm")]:
            path = os.path.join(a.dir, f"{name}.auto_{when}.txt")
            pick, est = estimates(open(path).read() if os.path.exists(path) else "")
            fmt = lambda v: "passed over" if v is None else ("?" if v == "?" else f"{v:.3g}")
            runs, option = {}, {}
            for m, run in [("wproj", wproj_run), ("wstack", "wstack")]:
                path = os.path.join(a.dir, f"{name}.{run}.json")
                if not os.path.exists(path):
                    continue
                r = json.load(open(path))
                runs[m] = r["wall_s"]
                option[m] = sum((s["device_s"] if s["backend"] == "cuda" and s["device_s"] > 0 else s["wall_s"])
                                for s in r["stages"] if s["id"] not in ("vis", "fits"))
            show = lambda d, m: f"{d[m]:.3f}" if m in d else "did not run"
            faster = min(runs, key=runs.get) if runs else "?"
            right = bool(runs) and pick == faster
            checked += 1
            right_count += right
            print(f"| {name} | {'cold' if when == 'before' else 'warm'} | {pick} "
                  f"| {fmt(est.get('wproj', '?'))} / {fmt(est.get('wstack', '?'))} "
                  f"| {show(runs, 'wproj')} / {show(runs, 'wstack')} | {show(option, 'wproj')} / {show(option, 'wstack')} "
                  f"| {faster} | {'yes' if right else '**no**'} |")
    print(f"\n{right_count} of {checked}: auto picked the method whose run was faster.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
