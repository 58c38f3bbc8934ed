"""Turns the two run reports of bench/cpu_gridders.sh into bench/results/cpu_gridders.md."""
import datetime
import json
import os
import subprocess
import sys

tiled, serial = (json.load(open(p)) for p in sys.argv[1:3])
cores = os.cpu_count()
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")


def stage(report, sid):
    return next(s for s in report["stages"] if s["id"] == sid)


print(f"# grid.tiled vs grid.serial on the CPU, EL56-82 shape\n")
print(f"{datetime.date.today()}, commit {commit}, {cores} cores ({model}), `bench/cpu_gridders.sh`.\n")
print("Same simulated data (31,395,840 visibilities, 16-source sky) and kernel stack in both runs.\n")
print("## Per-stage table of pipelines/bench_el56-82.yaml\n")
print("| stage | type | items | wall s | Mvis/s | Gupdates/s |")
print("|---|---|---|---|---|---|")
for s in tiled["stages"]:
    print(f"| {s['id']} | {s['type']} | {s['items_in']} | {s['wall_s']:.2f} | "
          f"{s['visibilities_per_s'] / 1e6:.2f} | {s['updates_per_s'] / 1e9:.3f} |")
print(f"\nWhole run: {tiled['wall_s']:.1f} s wall.\n")
print("## Gridders\n")
print("| gridder | threads | wall s | Mvis/s | Gupdates/s | Mvis/s per core | Gupdates/s per core |")
print("|---|---|---|---|---|---|---|")
t, s = stage(tiled, "grid"), stage(serial, "grid")
chain = sum(stage(tiled, i)["wall_s"] for i in ("sort", "box", "count", "buckets", "grid"))
nvis = s["visibilities"]
for name, g, threads, wall in (("grid.serial (Listing 1)", s, 1, s["wall_s"]),
                               ("grid.tiled", t, cores, t["wall_s"]),
                               ("w_sort + box + count + bucket_sort + grid.tiled", t, cores, chain)):
    print(f"| {name} | {threads} | {wall:.2f} | {nvis / wall / 1e6:.2f} | {g['updates'] / wall / 1e9:.3f} | "
          f"{nvis / wall / threads / 1e6:.2f} | {g['updates'] / wall / threads / 1e9:.3f} |")
print(f"\nSpeed-up of grid.tiled over grid.serial: {s['wall_s'] / t['wall_s']:.1f}x "
      f"(whole tiling chain included: {s['wall_s'] / chain:.1f}x). Updates: {t['updates']:.4g} "
      f"(sum over gridded visibilities of (2s+1)^2).")
