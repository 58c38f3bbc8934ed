#!/usr/bin/env bash
# The `uvflow` command as a user meets it: exit codes, one error message, no output file left by a
# failed, invalid or interrupted run. Usage: cli_test.sh UVFLOW PLUGIN_DIR SOURCE_DIR
set -uo pipefail
uvflow=$1 plugins=$2 src=$3
source "$src/tests/support/checks.sh"
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

# A loop's data past run.hold_memory_mb go to a scratch file: none is left behind; a scratch folder
# that does not exist stops the run (exit 5) naming the stage, the item and the folder.
run --plugin-path "$plugins" run --no-progress "$src/tests/pipelines/held_loop.yaml" --set run.hold_memory_mb=1 --set run.scratch_dir=.
check "held loop runs" [ "$rc" -eq 0 ]
check "held loop's total" grep -qxF "6e+06" total.txt
check "held loop says what went to the scratch file" grep -q "src.out: of 6 items, 5 (0.004 GB) in the scratch file" err.txt
check "held loop leaves no scratch file" [ "$(ls -A . | grep -v -e '^out.txt$' -e '^err.txt$' -e '^total.txt$')" = "" ]
rm -f total.txt
run --plugin-path "$plugins" run --no-progress "$src/tests/pipelines/held_loop.yaml" --set run.hold_memory_mb=1 --set run.scratch_dir=nowhere
check "missing scratch folder exits 5" [ "$rc" -eq 5 ]
check "missing scratch folder names stage, item and folder" grep -Eq "^error: stage 'src' \(backend cpu, host, item [0-9]+\): holding output 'out' for a later graph: cannot make a scratch file in 'nowhere': No such file or directory" err.txt
check "missing scratch folder leaves no file" no_files

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

# ---- Checks before running (docs/reliability.md)
check "unknown subcommand lists the commands" grep -q "^error: unknown command 'frobnicate'; the commands are run, check, plan, stages, describe" err.txt
run --plugin-path "$plugins" chek x.yaml
check "misspelt subcommand: did you mean" grep -q "^error: unknown command 'chek' (did you mean 'check'?)" err.txt
run
check "no subcommand exits 2" [ "$rc" -eq 2 ]
check "no subcommand lists the commands" grep -q "^error: no command given; the commands are run, check" err.txt
run --version
check "--version exits 0" [ "$rc" -eq 0 ]
check "--version: version, commit, CUDA" grep -qE "^uvflow [0-9]+\.[0-9]+\.[0-9]+( \(commit [0-9a-f]+(-dirty)?\))?, CUDA (on|off)" out.txt

# The pipeline file itself: the reason it cannot be read; a folder; a binary file echoes nothing; a tab is named.
run check nothere.yaml
check "missing pipeline exits 3" [ "$rc" -eq 3 ]
check "missing pipeline: the reason" grep -q "^nothere.yaml: error: cannot read the pipeline file: No such file or directory$" err.txt
mkdir folder.yaml
run run folder.yaml
check "pipeline that is a folder exits 3" [ "$rc" -eq 3 ]
check "pipeline that is a folder: said" grep -q "^folder.yaml: error: is a folder, not a pipeline file$" err.txt
rmdir folder.yaml
printf 'schema: \177ELF\002\001\000\000\033[31m\n' > binary.yaml
run check binary.yaml
check "binary pipeline exits 3" [ "$rc" -eq 3 ]
check "binary pipeline: no NUL echoed" [ "$(tr -dc '\000' < err.txt | wc -c)" -eq 0 ]
check "binary pipeline: no escape echoed" [ "$(tr -dc '\033' < err.txt | wc -c)" -eq 0 ]
check "binary pipeline: said" grep -q "^binary.yaml:1:15: error: not a text file" err.txt
printf 'schema: uvflow/1\nstages:\n  - {id: a, type: io.simulate}\n\t- {id: b, type: io.simulate}\n' > tab.yaml
run check tab.yaml
check "tab: named" grep -q "^tab.yaml:4:2: error: YAML syntax: illegal block entry (a tab character at line 4, column 1" err.txt
rm -f binary.yaml tab.yaml
run check "$src/pipelines/dirty_image.yaml" --set vars.npx=1024
check "--set of an unknown variable exits 3" [ "$rc" -eq 3 ]
check "--set of an unknown variable: did you mean" grep -q "^--set vars.npx=1024: error: no variable 'npx' to set (did you mean 'npix'?)$" err.txt

# Choices: check validates every option; a --set for the chosen option's stages is not held against
# the others; an error in an option not chosen is named with the option.
run check "$src/pipelines/dirty_image.yaml" --set vars.method=wstack --set wstack.epsilon=1e-5
check "choice: settings of the chosen option pass" [ "$rc" -eq 0 ]
sed 's/oversample: 4}/oversample: 3}/' "$src/pipelines/dirty_image.yaml" > choice.yaml
run check choice.yaml --set vars.method=wstack
check "choice: an error in the option not chosen fails check" [ "$rc" -eq 3 ]
check "choice: the error names the option" grep -q "^choice.yaml:[0-9]*:[0-9]*: error: with imaging.choose=wproj: " err.txt
rm -f choice.yaml

# Plugins: never from the working directory, even when one of the right name is there.
mkdir planted && cp "$plugins/test_stages_plugin.so" planted/
(cd planted && "$uvflow" check "$src/tests/pipelines/slow.yaml" >../out.txt 2>../err.txt)
rc=$?
rm -rf planted
check "plugin in the working directory is not loaded" [ "$rc" -eq 3 ]
check "plugin not found: where it looked" grep -q "plugin 'test_stages_plugin.so' not found (looked for $src/tests/pipelines/test_stages_plugin.so;" err.txt

# -q: nothing but errors, no table.
run -q --plugin-path "$plugins" run --no-progress "$src/tests/pipelines/slow.yaml" --set src.n=3 --set src.delay_ms=1
check "-q run exits 0" [ "$rc" -eq 0 ]
check "-q prints nothing" [ ! -s out.txt -a ! -s err.txt ]
rm -f total.txt

# A pipeline that writes nothing runs, with a warning.
printf 'schema: uvflow/1\nplugins: [%s]\nstages:\n  - {id: src, type: test.source, params: {n: 2}}\n  - {id: sum, type: test.sum, in: {in: src}}\n' \
  "$plugins/test_stages_plugin.so" > nowriter.yaml
run run --no-progress nowriter.yaml
check "no writer: runs" [ "$rc" -eq 0 ]
check "no writer: warned" grep -q "^nowriter.yaml: warning: no stage writes a file" err.txt
rm -f nowriter.yaml

# Outputs: a folder that cannot be made, two writers of one file, a stream without {index}. `check`
# finds each; `run` stops before anything computes (exit 3), nothing written.
touch afile
run --plugin-path "$plugins" check "$src/tests/pipelines/slow.yaml" --set out.path=afile/total.txt
check "check: output under a file exits 3" [ "$rc" -eq 3 ]
check "check: output under a file: said" grep -q "^--set out.path=afile/total.txt: error: stage 'out' (test.write_total) parameter 'path': cannot create the folder 'afile': 'afile' is a file$" err.txt
run --plugin-path "$plugins" run --no-progress "$src/tests/pipelines/slow.yaml" --set out.path=afile/total.txt
check "run: output under a file exits 3 before running" [ "$rc" -eq 3 ]
check "run: output under a file: said once" [ "$(grep -c "'afile' is a file" err.txt)" -eq 1 ]
rm -f afile
if [ "$(id -u)" -ne 0 ]; then  # root writes anywhere
  mkdir ro && chmod 555 ro
  run --plugin-path "$plugins" check "$src/tests/pipelines/slow.yaml" --set out.path=ro/total.txt
  check "check: read-only folder exits 3" [ "$rc" -eq 3 ]
  check "check: read-only folder: said" grep -q "cannot write in the folder 'ro' (Permission denied)" err.txt
  chmod 755 ro && rmdir ro
fi
run check "$src/pipelines/dirty_image.yaml" --set png.path=out/dirty.fits --set run.report=out/dirty.fits
check "two writers of one file exit 3" [ "$rc" -eq 3 ]
check "two writers: the second is named" grep -q "^--set png.path=out/dirty.fits: error: stage 'png' (io.write_png) parameter 'path': writes 'out/dirty.fits', as stage 'fits' (io.write_fits) parameter 'path' does ($src/pipelines/dirty_image.yaml:" err.txt
check "two writers: the report too" grep -q "^--set run.report=out/dirty.fits: error: the run report: writes 'out/dirty.fits'" err.txt
run check "$src/pipelines/straylight.yaml" --set fits.path=out/frame.fits --set frames.count=3
check "stream writer without {index} exits 3" [ "$rc" -eq 3 ]
check "stream writer without {index}: said" grep -q "parameter 'path': 'out/frame.fits' has no {index}, but 3 items arrive and each would overwrite the last; write 'out/frame_{index}.fits'$" err.txt
run run --no-progress "$src/pipelines/straylight.yaml" --set fits.path=out/frame.fits --set frames.count=3
check "run: stream writer without {index} exits 3 before running" [ "$rc" -eq 3 ]
check "run: nothing written" no_files
run check "$src/pipelines/straylight.yaml" --set fits.path=out/frame.fits --set frames.count=1
check "one item needs no {index}" [ "$rc" -eq 0 ]

# A cuda stage with no device: `check` warns (the pipeline is valid), `run` refuses before running.
if "$uvflow" --version | grep -qE "CUDA (off|on: no CUDA device)"; then
  run check "$src/pipelines/dirty_image_gpu.yaml"
  check "check: no device is a warning" [ "$rc" -eq 0 ]
  check "check: no device: said" grep -q "^$src/pipelines/dirty_image_gpu.yaml:[0-9]*:[0-9]*: warning: stages 'grid', 'image', 'corr' use backend cuda, but" err.txt
  run run "$src/pipelines/dirty_image_gpu.yaml"
  check "run: no device exits 3" [ "$rc" -eq 3 ]
  check "run: nothing written" no_files
fi

# The README's `uvflow check pipelines/*.yaml` on a fresh clone: ms_dirty_image.yaml reads
# out/sim.ms, which simulate_to_ms.yaml makes: a warning naming it; `run` refuses with the same words.
run check "$src"/pipelines/*.yaml
check "check pipelines/*.yaml passes on a fresh clone" [ "$rc" -eq 0 ]
check "missing input: names the pipeline that makes it" grep -q "^$src/pipelines/ms_dirty_image.yaml:[0-9]*:[0-9]*: warning: stage 'vis' (io.read_ms) parameter 'path': 'out/sim.ms' does not exist (make it with $src/pipelines/simulate_to_ms.yaml" err.txt
run run "$src/pipelines/ms_dirty_image.yaml"
check "run: missing input exits 3" [ "$rc" -eq 3 ]
check "run: missing input names the pipeline" grep -q "error: stage 'vis' (io.read_ms) parameter 'path': 'out/sim.ms' does not exist (make it with $src/pipelines/simulate_to_ms.yaml" err.txt
run check "$src/pipelines/ms_dirty_image.yaml" --set vars.ms=elsewhere.ms
check "missing input nobody makes is an error" grep -q "error: stage 'vis' (io.read_ms) parameter 'path': 'elsewhere.ms' does not exist$" err.txt
check "run: nothing written" no_files

# ---- Outputs, signals and errors (docs/reliability.md)
ulimit -c 0  # the crash cases below must not leave core files
hidden() { ls -A | grep '^\.' ; }  # temporaries are hidden (.NAME.uvflow-...tmp)
wait_handlers() {  # wait_handlers PID: until uvflow has installed its handlers (HUP INT QUIT SEGV TERM)
  for _ in $(seq 600); do
    caught=$(awk '/^SigCgt:/ {print $2}' /proc/$1/status 2>/dev/null)
    [ -n "$caught" ] && (( (0x$caught & 0x4407) == 0x4407 )) && return 0
    sleep 0.05
  done
}
# SIGTERM, SIGHUP and SIGQUIT cancel the run as SIGINT does, exit 128 + the signal, leave nothing.
for sig in TERM:15 HUP:1 QUIT:3; do
  name=${sig%:*} num=${sig#*:}
  "$uvflow" --plugin-path "$plugins" run --no-progress "$src/tests/pipelines/slow.yaml" --report r.json >out.txt 2>err.txt &
  pid=$!
  wait_handlers $pid
  kill -$name $pid
  wait $pid
  rc=$?
  check "SIG$name exits $((128 + num))" [ "$rc" -eq $((128 + num)) ]
  check "SIG$name is reported" grep -q "^interrupted (SIG$name): the run was cancelled; no output file was written$" err.txt
  check "SIG$name leaves no file, hidden or not" no_files
done

# A SIGKILLed run leaves its temporaries (here the report's); the next run writing there removes them.
"$uvflow" --plugin-path "$plugins" run --no-progress "$src/tests/pipelines/slow.yaml" --report r.json >out.txt 2>err.txt &
pid=$!
for _ in $(seq 600); do [ -n "$(hidden)" ] && break; sleep 0.05; done
kill -KILL $pid
wait $pid 2>/dev/null
check "a killed run leaves a temporary" [ -n "$(hidden)" ]
run --plugin-path "$plugins" run --no-progress "$src/tests/pipelines/slow.yaml" --set src.n=3 --set src.delay_ms=1
check "the next run succeeds" [ "$rc" -eq 0 ]
check "the next run removes the killed run's temporaries" [ -z "$(hidden)" ]
check "the next run says so" grep -q "removed 1 temporary output of killed runs from ." err.txt
rm -f total.txt

# An output path that is an existing folder: a clear error, nothing written, no temporary left.
mkdir total.txt
run --plugin-path "$plugins" run --no-progress "$src/tests/pipelines/slow.yaml" --set src.n=3 --set src.delay_ms=1
check "output path that is a folder fails" [ "$rc" -eq 5 ]
check "output path that is a folder is named" grep -q "output path total.txt is an existing folder" err.txt
check "output path that is a folder leaves no temporary" [ -z "$(hidden)" ]
rmdir total.txt

# A report that cannot be written fails the run before it computes: no output, no temporary.
touch notadir
run --plugin-path "$plugins" run --no-progress "$src/tests/pipelines/slow.yaml" --set src.n=3 --set src.delay_ms=1 \
  --report notadir/r.json
check "unwritable report fails" [ "$rc" -eq 3 -o "$rc" -eq 5 ]  # caught by the checks (3) or when the run starts (5)
check "unwritable report names the path" grep -q "notadir" err.txt
check "unwritable report: no output written" [ ! -e total.txt ]
rm -f notadir
# The report is committed with the outputs, and lists them.
run --plugin-path "$plugins" run --no-progress "$src/tests/pipelines/slow.yaml" --set src.n=3 --set src.delay_ms=1 --report r.json
check "report written with the outputs" grep -q '"total.txt"' r.json
rm -f r.json total.txt

# A stage that crashes is named, with its item, before the signal ends the process.
run --plugin-path "$plugins" run --no-progress "$src/tests/pipelines/crash.yaml"
check "segfault exits 139" [ "$rc" -eq 139 ]
check "segfault names stage and item" grep -q "^fatal: SIGSEGV (invalid memory access) in stage 'crash' (backend cpu, item 3)" err.txt
run --plugin-path "$plugins" run --no-progress "$src/tests/pipelines/crash.yaml" --set crash.how=abort
check "abort exits 134" [ "$rc" -eq 134 ]
check "abort names stage and item" grep -q "^fatal: SIGABRT (aborted) in stage 'crash' (backend cpu, item 3)" err.txt
# A stack overflow leaves no stack for the handler: it runs on the thread's signal stack.
run --plugin-path "$plugins" run --no-progress "$src/tests/pipelines/crash.yaml" --set crash.how=stack
check "stack overflow exits 139" [ "$rc" -eq 139 ]
check "stack overflow names stage and item" grep -q "^fatal: SIGSEGV (invalid memory access) in stage 'crash' (backend cpu, item 3)" err.txt
run --plugin-path "$plugins" run --no-progress "$src/tests/pipelines/crash.yaml" --set crash.how=alloc
check "out of memory exits 5" [ "$rc" -eq 5 ]
check "out of memory names stage, item and size" \
  grep -q "^error: stage 'crash' (backend cpu, host, item 3): out of memory: could not allocate 268435456.0 GiB for a host array$" err.txt
rm -rf .[!.]* total.txt  # what the crashes left (the next run would remove it)

# A setup error says so (not "end of stream").
run --plugin-path "$plugins" run "$src/tests/pipelines/bad_input.yaml"
check "setup error is labelled setup" grep -q "^error: stage 'src' (backend cpu, setup): prepare: " err.txt

# The kernel cache lives under $XDG_CACHE_HOME/uvflow; `uvflow cache` lists it, `cache clear` empties it.
export XDG_CACHE_HOME=$work/xdg
mkdir -p "$XDG_CACHE_HOME/uvflow/kernels"
head -c 3072 /dev/zero > "$XDG_CACHE_HOME/uvflow/kernels/wproj-0123456789abcdef.bin"
echo keep > "$XDG_CACHE_HOME/uvflow/kernels/notes.txt"
run cache
check "cache lists" [ "$rc" -eq 0 ]
check "cache lists the stack" grep -q "wproj-0123456789abcdef.bin  3.0 KiB" out.txt
check "cache says the total and the cap" grep -q "^1 file, 3.0 KiB of 4.0 GiB (UVFLOW_CACHE_MAX)$" out.txt
UVFLOW_CACHE_MAX=1M run cache
check "cache cap from UVFLOW_CACHE_MAX" grep -q "of 1.0 MiB (UVFLOW_CACHE_MAX)$" out.txt
run cache clear
check "cache clear" grep -q "^removed 1 file (3.0 KiB) from $XDG_CACHE_HOME/uvflow/kernels$" out.txt
check "cache clear removes the stack" [ ! -e "$XDG_CACHE_HOME/uvflow/kernels/wproj-0123456789abcdef.bin" ]
check "cache clear keeps other files" [ -e "$XDG_CACHE_HOME/uvflow/kernels/notes.txt" ]
rm -rf "$work/xdg"
unset XDG_CACHE_HOME

check_summary
