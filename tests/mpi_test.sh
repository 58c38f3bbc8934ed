#!/usr/bin/env bash
# `mpirun -np N uvflow run` (docs/distributed.md) against one process running the same file.
# Usage: mpi_test.sh MODE UVFLOW MPIEXEC PLUGIN_DIR SOURCE_DIR, MODE one of
#   simulated  pipelines/dirty_image_mpi.yaml, natural, uniform and briggs: np 1, 2, 4 vs one process
#   ms         pipelines/ms_dirty_image_mpi.yaml on a Measurement Set, the same
#   frames     pipelines/straylight.yaml with frames.share=frames: np 2, 4 write the same files
#   gpu        tests/pipelines/atomic_mpi.yaml on the cuda backends (grid.atomic uvflow): np 2 and 3
#              ranks sharing this node's GPUs, mpi.reduce_grid cpu (through the host) and cuda (CUDA
#              IPC), double and float sums, against one process; skipped (77) without a CUDA device
#   failure    a rank that fails, a rank killed, mpirun terminated: every rank stops within
#              seconds, the error said once, no output file
# The pipelines set grid.tiled's accumulate: double, and mpi.reduce_grid sums the ranks' double
# grids, rounded to float once: the images of np 1, 2 and 4 may differ from one process's by at
# most 1e-6 of the peak in any pixel (tests/mpi_compare.py; they are identical today, and differed
# by up to 1.1e-5 with accumulate: float).
# The gridded-visibility counts summed over the ranks must equal one process's (a block gridded
# twice or never would show).
set -uo pipefail
mode=$1 uvflow=$2 mpiexec=$3 plugins=$4 src=$5
source "$src/tests/support/checks.sh"
# Debian's interpreter has the test's modules (numpy, astropy); elsewhere (the GPU machine) name one
# with numpy in UVFLOW_TEST_PYTHON.
py=${UVFLOW_TEST_PYTHON:-/usr/bin/python3}
mpi() { "$mpiexec" --allow-run-as-root --oversubscribe -q "$@"; }

# gridded REPORT: visibilities the `grid` stage gridded, summed over the ranks of the report.
gridded() {
  "$py" -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(int(sum(s["visibilities"] for k in r.get("ranks", [r]) for s in k["stages"] if s["id"] == "grid")))' "$1"
}

# local_ranks REPORT: the ranks' indices on their node, in order.
local_ranks() {
  "$py" -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(" ".join(str(k.get("local_rank", -1)) for k in sorted(r.get("ranks", [r]), key=lambda k: k["local_rank"])))' "$1"
}

images() {  # images PIPELINE SETTINGS...
  local pipeline=$1; shift
  for w in natural uniform briggs; do
    "$uvflow" run -q "$pipeline" "$@" --set vars.weighting=$w --set fits.path=$w-one.fits --set run.report=$w-one.json
    check "$w: one process" [ $? -eq 0 ]
    for n in 1 2 4; do
      mpi -np $n "$uvflow" run -q "$pipeline" "$@" --set vars.weighting=$w --set fits.path=$w-$n.fits \
        --set run.report=$w-$n.json
      check "$w: mpirun -np $n exits 0" [ $? -eq 0 ]
      check "$w: np $n grids every visibility once" [ "$(gridded $w-$n.json)" = "$(gridded $w-one.json)" ]
      check "$w: np $n ranks are 0..$((n - 1)) on this node (each takes device local_rank mod count)" \
        [ "$(local_ranks $w-$n.json)" = "$(seq -s ' ' 0 $((n - 1)))" ]
    done
    check "$w: np 1, 2, 4 images agree with one process to 1e-6 of the peak" \
      "$py" "$src/tests/mpi_compare.py" 1e-6 $w-one.fits $w-1.fits $w-2.fits $w-4.fits
  done
}

case $mode in
simulated)
  # 8 blocks of one dump: np 4 gives each rank 2.
  images "$src/pipelines/dirty_image_mpi.yaml" \
    --set vars.preset=tiny --set vars.npix=256 --set run.threads=1 \
    --set vis.dumps_per_block=1 --set vis2.dumps_per_block=1
  # grid.atomic with double sums: the ranks' double grids kept and summed by mpi.reduce_grid.
  "$uvflow" run -q "$src/tests/pipelines/atomic_mpi.yaml" --set fits.path=atomic-one.fits --set run.report=atomic-one.json
  check "atomic: one process" [ $? -eq 0 ]
  for n in 2 4; do
    mpi -np $n "$uvflow" run -q "$src/tests/pipelines/atomic_mpi.yaml" --set fits.path=atomic-$n.fits \
      --set run.report=atomic-$n.json
    check "atomic: mpirun -np $n exits 0" [ $? -eq 0 ]
    check "atomic: np $n grids every visibility once" [ "$(gridded atomic-$n.json)" = "$(gridded atomic-one.json)" ]
  done
  check "atomic: np 2 and 4 images agree with one process to 1e-6 of the peak" \
    "$py" "$src/tests/mpi_compare.py" 1e-6 atomic-one.fits atomic-2.fits atomic-4.fits
  # 2 blocks over 4 ranks: ranks 2 and 3 grid nothing (a zero grid, no double cells), which must not
  # make the others' double grids go through the reduction in float.
  few=(--set vars.preset=tiny --set vars.npix=256 --set vis.dumps_per_block=5 --set vis2.dumps_per_block=5)
  "$uvflow" run -q "$src/pipelines/dirty_image_mpi.yaml" "${few[@]}" --set fits.path=few-one.fits --set run.report=few-one.json
  mpi -np 4 "$uvflow" run -q "$src/pipelines/dirty_image_mpi.yaml" "${few[@]}" --set fits.path=few-4.fits --set run.report=few-4.json
  check "ranks without blocks: mpirun -np 4 exits 0" [ $? -eq 0 ]
  check "ranks without blocks: the image agrees with one process to 1e-6 of the peak" \
    "$py" "$src/tests/mpi_compare.py" 1e-6 few-one.fits few-4.fits
  # Sources left at share: none: every rank grids everything, which mpi.reduce_grid refuses.
  mpi -np 2 "$uvflow" run -q "$src/pipelines/dirty_image_mpi.yaml" --set vars.preset=tiny --set vars.npix=256 \
    --set vis.share=none --set vis2.share=none --set fits.path=twice.fits --set run.report=twice.json 2>err.txt
  rc=$?
  check "share none under mpirun: exit 4 (got $rc)" [ $rc -eq 4 ]
  check "share none under mpirun: said" grep -q "the 2 ranks gridded 32256 visibilities of a set of 16128" err.txt
  check "share none under mpirun: nothing written" [ ! -e twice.fits -a ! -e twice.json ]
  ;;
ms)
  "$uvflow" run -q "$src/pipelines/simulate_to_ms.yaml" --set ms.path=sim.ms
  check "the Measurement Set is written" [ $? -eq 0 ]
  # 8 blocks of 2016 rows (one dump of 64 stations).
  images "$src/pipelines/ms_dirty_image_mpi.yaml" --set vars.ms=sim.ms --set vars.npix=256 --set run.threads=1 \
    --set vars.rows_per_block=2016
  ;;
frames)
  set_frames=(--set frames.width=128 --set frames.height=256 --set frames.count=7 --set frames.share=frames)
  "$uvflow" run -q "$src/pipelines/straylight.yaml" "${set_frames[@]}" --set "fits.path=one/frame_{index}.fits"
  check "frames: one process" [ $? -eq 0 ]
  for n in 2 4; do
    mpi -np $n "$uvflow" run -q "$src/pipelines/straylight.yaml" "${set_frames[@]}" --set "fits.path=np$n/frame_{index}.fits"
    check "frames: mpirun -np $n exits 0" [ $? -eq 0 ]
    check "frames: np $n writes the same 7 files" diff -r one np$n
  done
  ;;
failure)
  slow=$src/tests/pipelines/slow.yaml
  no_output() { [ ! -e total.txt ] && [ -z "$(ls -A | grep '^\.total')" ]; }
  # Rank 1 throws at item 7 while rank 0 streams on: exit 5, rank 1's message once, nothing written.
  start=$SECONDS
  mpi -np 1 "$uvflow" --plugin-path "$plugins" run --no-progress "$slow" : \
      -np 1 "$uvflow" --plugin-path "$plugins" run --no-progress "$src/tests/pipelines/fail_mid_stream.yaml" >out.txt 2>err.txt
  rc=$?
  check "failing rank: mpirun exits 5 (got $rc)" [ $rc -eq 5 ]
  check "failing rank: within 5 s" [ $((SECONDS - start)) -le 5 ]
  check "failing rank: its error once, with its rank" \
    [ "$(grep -c "^rank 1: error: stage 'boom' (backend cpu, host, item 7): deliberate failure$" err.txt)" -eq 1 ]
  check "failing rank: no other error" [ "$(grep -c 'error' err.txt)" -eq 1 ]
  check "failing rank: nothing written" no_output
  # Rank 1 killed (SIGKILL): the other stops, nothing written.
  # (mpiexec itself in the background, not a subshell running it: $! must be mpiexec)
  "$mpiexec" --allow-run-as-root --oversubscribe -q -np 2 sh -c 'echo $$ > pid.$OMPI_COMM_WORLD_RANK; exec "$0" "$@"' \
      "$uvflow" --plugin-path "$plugins" run --no-progress "$slow" >out.txt 2>err.txt &
  job=$!
  # Both ranks started (each wrote its pid just before exec), however loaded the machine, then a
  # second of streaming.
  for _ in $(seq 600); do [ -s pid.0 ] && [ -s pid.1 ] && break; sleep 0.05; done
  sleep 1
  start=$SECONDS
  kill -KILL "$(cat pid.1)"
  wait $job
  rc=$?
  check "killed rank: mpirun fails (got $rc)" [ $rc -ne 0 ]
  check "killed rank: the other stops within 5 s" [ $((SECONDS - start)) -le 5 ]
  check "killed rank: nothing written" no_output
  # mpirun interrupted (SIGTERM: a script's background job ignores SIGINT): every rank stops,
  # nothing written.
  "$mpiexec" --allow-run-as-root --oversubscribe -q -np 2 "$uvflow" --plugin-path "$plugins" run --no-progress "$slow" \
    >out.txt 2>err.txt &
  job=$!
  sleep 2
  start=$SECONDS
  kill -TERM $job
  wait $job
  rc=$?
  check "interrupted: mpirun fails (got $rc)" [ $rc -ne 0 ]
  check "interrupted: within 5 s" [ $((SECONDS - start)) -le 5 ]
  # Rank 0 says it at most once: mpirun follows its SIGTERM with a SIGKILL that may come first.
  check "interrupted: said at most once" [ "$(grep -c 'no output file was written' err.txt)" -le 1 ]
  check "interrupted: nothing written" no_output
  ;;
gpu)
  command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "no CUDA device: skipped"; exit 77; }
  cuda=(--set grid.backend=cuda --set grid.variant=uvflow --set kernels.layouts=rows --set image.backend=cuda
        --set corr.backend=cuda --set vis.preset=small --set vars.npix=512)
  for acc in double float; do
    "$uvflow" run -q "$src/tests/pipelines/atomic_mpi.yaml" "${cuda[@]}" --set grid.accumulate=$acc \
      --set fits.path=$acc-one.fits --set run.report=$acc-one.json
    check "gpu $acc: one process" [ $? -eq 0 ]
    for n in 2 3; do
      for b in cpu cuda; do
        mpi -np $n "$uvflow" run -q "$src/tests/pipelines/atomic_mpi.yaml" "${cuda[@]}" --set grid.accumulate=$acc \
          --set grid_sum.backend=$b --set fits.path=$acc-$n-$b.fits --set run.report=$acc-$n-$b.json
        check "gpu $acc: mpirun -np $n, reduce_grid $b, exits 0" [ $? -eq 0 ]
        check "gpu $acc: np $n $b grids every visibility once" [ "$(gridded $acc-$n-$b.json)" = "$(gridded $acc-one.json)" ]
      done
    done
  done
  # 2 blocks over 3 ranks: rank 2 grids nothing.
  few=(--set vis.preset=tiny --set vis.dumps_per_block=5 --set grid.accumulate=double)
  "$uvflow" run -q "$src/tests/pipelines/atomic_mpi.yaml" "${cuda[@]}" "${few[@]}" --set fits.path=few-one.fits
  for b in cpu cuda; do
    mpi -np 3 "$uvflow" run -q "$src/tests/pipelines/atomic_mpi.yaml" "${cuda[@]}" "${few[@]}" --set grid_sum.backend=$b \
      --set fits.path=few-3-$b.fits
    check "gpu: a rank without blocks, reduce_grid $b, exits 0" [ $? -eq 0 ]
  done
  check "gpu: a rank without blocks: np 3 agrees with one process to 1e-6 of the peak" \
    "$py" "$src/tests/mpi_compare.py" 1e-6 few-one.fits few-3-cpu.fits few-3-cuda.fits
  # Double sums: the image does not depend on the ranks or the reduction's backend. Float sums:
  # the float atomics' order varies from run to run (about 1e-5 of the peak, mpi_h100.md).
  check "gpu double: np 2, 3 (cpu and cuda reductions) agree with one process to 1e-6 of the peak" \
    "$py" "$src/tests/mpi_compare.py" 1e-6 double-one.fits double-{2,3}-{cpu,cuda}.fits
  check "gpu float: np 2, 3 (cpu and cuda reductions) agree with one process to 1e-4 of the peak" \
    "$py" "$src/tests/mpi_compare.py" 1e-4 float-one.fits float-{2,3}-{cpu,cuda}.fits
  ;;
*)
  echo "unknown mode $mode"
  exit 2
  ;;
esac
check_summary
