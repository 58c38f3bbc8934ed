#!/usr/bin/env bash
# Distributed imaging scaling (docs/distributed.md): pipelines/dirty_image_mpi.yaml under
# `mpirun -np N` for each N, CPU cores split evenly between the ranks (run.threads), best of
# REPEAT runs, and a Markdown table of the run time, the gridding time of the slowest rank, the
# time in communication (the density and grid reductions, waiting included) and the speed-up.
# Usage: bench/mpi_scaling.sh [UVFLOW] [NP_LIST] [OUT.md] [-- extra uvflow args]
#   bench/mpi_scaling.sh build/uvflow 1,2 bench/results/mpi_cpu.md                 (the 2-core VM)
#   bench/mpi_scaling.sh ./uvflow 1,2,4,8 bench/results/mpi_h100_cpu.md            (16 cores)
#   bench/mpi_scaling.sh ./uvflow 1 bench/results/mpi_h100_gpu.md -- --set grid.backend=cuda ...
# Environment: PRESET (synthetic), NPIX (1024), WEIGHTING (uniform), REPEAT (2), CORES (nproc),
# COMMIT (git rev-parse), MPIEXEC (mpirun), BIND (--bind-to none: Open MPI binds each rank to one core when np <= 2, which
# would put all of a rank's threads on that core; on a NUMA machine --map-by slot:PE=T --bind-to core).
set -euo pipefail
cd "$(dirname "$0")/.."
uvflow=${1:-build/uvflow}
nps=${2:-1,2}
out=${3:-bench/results/mpi_cpu.md}
shift $(($# < 3 ? $# : 3))
[ "${1:-}" = "--" ] && shift
extra=("$@")
preset=${PRESET:-synthetic} npix=${NPIX:-1024} weighting=${WEIGHTING:-uniform} repeat=${REPEAT:-2}
cores=${CORES:-$(nproc)} mpiexec=${MPIEXEC:-mpirun} bind=${BIND:---bind-to none}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
reports=()
load=$(cut -d' ' -f1-3 /proc/loadavg)
for np in ${nps//,/ }; do
  threads=$(( cores / np > 0 ? cores / np : 1 ))
  for r in $(seq "$repeat"); do
    "$mpiexec" --allow-run-as-root --oversubscribe -q $bind -np "$np" "$uvflow" run -q pipelines/dirty_image_mpi.yaml \
      --set vars.preset="$preset" --set vars.npix="$npix" --set vars.weighting="$weighting" \
      --set run.threads="$threads" --set fits.path="$work/image.fits" --set run.report="$work/np$np-$r.json" \
      "${extra[@]}"
    reports+=("$work/np$np-$r.json")
  done
done
commit=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
{
  echo "# Distributed imaging: mpirun -np N, pipelines/dirty_image_mpi.yaml"
  echo
  echo "$(date -u +%Y-%m-%d), $(hostname), $(lscpu | sed -n 's/^Model name: *//p' | head -1), $cores cores," \
       "$(free -g | awk '/^Mem/ {print $2}') GiB; uvflow $commit ($("$uvflow" --version | sed 's/^uvflow //'));" \
       "$("$mpiexec" --version | head -1)."
  echo "Load average before the runs (other users of the machine): $load."
  echo "Preset $preset, ${npix}^2 image, $weighting weighting, cores split evenly between the ranks" \
       "(run.threads), mpirun $bind, extra arguments: ${extra[*]:-none}; best of $repeat runs (bench/mpi_scaling.sh)."
  echo
  /usr/bin/python3 - "${reports[@]}" <<'PY'
import json, sys
from collections import defaultdict
best = {}
for path in sys.argv[1:]:
    r = json.load(open(path))
    ranks = r.get("ranks", [r])
    np_ = len(ranks)
    if np_ in best and best[np_]["wall_s"] <= r["wall_s"]:
        continue
    def stage(k, sid):
        return next((s for s in k["stages"] if s["id"] == sid), None)
    grid = max(stage(k, "grid")["wall_s"] for k in ranks)
    dev = max(stage(k, "grid")["device_s"] for k in ranks)
    best[np_] = dict(wall_s=r["wall_s"], grid=grid, grid_dev=dev, comm=max(k["communication_s"] for k in ranks),
                     reduce=stage(r, "grid_sum")["wall_s"], density=stage(r, "density_sum")["wall_s"],
                     vis=sum(stage(k, "grid")["visibilities"] for k in ranks), device=r["device"])
base = best[min(best)]["wall_s"] * min(best)
print("| ranks | device | run s | speed-up | gridding s (slowest rank) | communication s (most) | grid reduction s (rank 0) | density reduction s | visibilities |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
for n in sorted(best):
    b = best[n]
    g = f"{b['grid']:.3f}" + (f" (device {b['grid_dev']:.3f})" if b["grid_dev"] > 0 else "")
    print(f"| {n} | {b['device']} | {b['wall_s']:.3f} | {best[min(best)]['wall_s'] / b['wall_s']:.2f} | {g} | "
          f"{b['comm']:.3f} | {b['reduce']:.3f} | {b['density']:.3f} | {int(b['vis']):,} |")
PY
} > "$out"
cat "$out"
