#!/usr/bin/env bash
# The `uvflow` command as a user meets it: exit codes, one error message, no output file left by a
# failed, invalid or interrupted run. Usage: cli_test.sh UVFLOW PLUGIN_DIR SOURCE_DIR
set -uo pipefail
uvflow=$1 plugins=$2 src=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fails=0 passes=0
check() {  # check NAME CONDITION...
  local name=$1; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $name"; fails=$((fails + 1)); fi
}
run() {  # run ARGS...: sets rc, out, err
  "$uvflow" "$@" >out.txt 2>err.txt
  rc=$?
}
no_files() { [ -z "$(ls -A . | grep -v -e '^out.txt$' -e '^err.txt$')" ]; }

# An invalid pipeline: exit 3, every error listed, nothing run.
run run "$src/tests/configs/many_errors.yaml"
check "invalid pipeline exits 3" [ "$rc" -eq 3 ]
check "invalid pipeline lists 5 errors" grep -q "^5 errors; nothing was run$" err.txt
check "invalid pipeline writes nothing" no_files

# A stage throws mid-stream: exit 5, exactly one error message naming stage and item, no file.
run --plugin-path "$plugins" run "$src/tests/pipelines/fail_mid_stream.yaml"
check "failing stage exits 5" [ "$rc" -eq 5 ]
check "one error message" [ "$(grep -c '^error:' err.txt)" -eq 1 ]
check "error names stage and item" grep -q "^error: stage 'boom' (backend cpu, host, item 7): deliberate failure$" err.txt
check "failed run leaves no file" no_files

# Unusable input: exit 4.
run --plugin-path "$plugins" run "$src/tests/pipelines/bad_input.yaml"
check "bad input exits 4" [ "$rc" -eq 4 ]
check "bad input names the column" grep -q "column TEST" err.txt
check "bad input leaves no file" no_files

# Ctrl-C: a real SIGINT to the process; exit 130, no file, said once.
"$uvflow" --plugin-path "$plugins" run --no-progress "$src/tests/pipelines/slow.yaml" >out.txt 2>err.txt &
pid=$!
# Once it catches SIGINT (bit 2 of SigCgt: its handler is installed), however loaded the machine.
for _ in $(seq 600); do
  caught=$(awk '/^SigCgt:/ {print $2}' /proc/$pid/status 2>/dev/null)
  [ -n "$caught" ] && (( 0x$caught & 2 )) && break
  sleep 0.05
done
kill -INT $pid
wait $pid
rc=$?
check "interrupt exits 130" [ "$rc" -eq 130 ]
check "interrupt is reported" grep -q "^interrupted: the run was cancelled; no output file was written$" err.txt
check "interrupt leaves no file" no_files

# The same slow pipeline, uninterrupted and shortened, does write its file.
run --plugin-path "$plugins" run --no-progress "$src/tests/pipelines/slow.yaml" --set src.n=3 --set src.delay_ms=1
check "successful run exits 0" [ "$rc" -eq 0 ]
check "successful run writes its file" [ -f total.txt ]
rm -f total.txt

# Usage errors: exit 2.
run describe grid.tiledd
check "unknown stage in describe exits 2" [ "$rc" -eq 2 ]
check "describe suggests" grep -q "did you mean 'grid.tiled'" err.txt
run frobnicate
check "unknown subcommand exits 2" [ "$rc" -eq 2 ]

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
