"""Sums ncu's per-kernel durations (CSV on stdin) by stage and block: each kernel belongs to the
stage whose namespace it names; CUB's sorts and scans to the stage that launched the kernel
before them. The gridding kernel itself is listed apart from grid.tiled's preparation."""
import collections
import csv
import sys

STAGES = {"uvw_w_sort::": "uvw.w_sort", "uvw_bounding_box::": "uvw.bounding_box", "tiles_count::": "tiles.count",
          "tiles_bucket_sort::": "tiles.bucket_sort", "grid_tiled::": "grid.tiled (preparation)"}

rows = list(csv.reader(sys.stdin))
name, value = rows[0].index("Kernel Name"), rows[0].index("Metric Value")
per_block = collections.defaultdict(lambda: collections.OrderedDict())
block, stage = 0, None
for r in rows[1:]:
    kernel, us = r[name], float(r[value].replace(",", "")) / 1e3
    if "plane_keys" in kernel:
        block += 1
    stage = next((s for prefix, s in STAGES.items() if prefix in kernel), stage)
    key = "grid.tiled (gridding kernel)" if "grid_tiled::" in kernel and "_kernel<" in kernel else stage
    per_block[block][key] = per_block[block].get(key, 0.0) + us
print("| stage | " + " | ".join(f"block {b} (us)" for b in per_block) + " |")
print("|---|" + "---|" * len(per_block))
for s in next(iter(per_block.values())):
    print(f"| {s} | " + " | ".join(f"{per_block[b].get(s, 0):.0f}" for b in per_block) + " |")
