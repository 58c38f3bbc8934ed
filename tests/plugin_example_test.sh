#!/usr/bin/env bash
# The plugin example builds out of tree against this build and runs from YAML.
# Usage: plugin_example_test.sh UVFLOW BUILD_DIR SOURCE_DIR
set -euo pipefail
uvflow=$1 build=$2 src=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake -S "$src/examples/plugin" -B "$work/plugin" -DCMAKE_BUILD_TYPE=Release -Duvflow_DIR="$build" >/dev/null
cmake --build "$work/plugin" >/dev/null
test -f "$work/plugin/amplitude_clip.so"
cd "$work"
"$uvflow" --plugin "$work/plugin/amplitude_clip.so" describe example.amplitude_clip | grep -q "max_jy"
"$uvflow" run --no-progress "$src/examples/plugin/clip.yaml" --plugin-path "$work/plugin" | tee run.txt
grep -Eq "^clip +example.amplitude_clip +cpu +2 " run.txt  # both blocks went through the plugin stage
test -s out/plugin_clip.fits
echo "1 passed, 0 failed"
