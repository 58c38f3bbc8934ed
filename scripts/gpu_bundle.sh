#!/usr/bin/env bash
# Packs what the lent H100 machine needs to run uvflow's GPU tests and benchmarks: the binaries
# built here (sm_90) and every non-system library they load. That machine has CUDA but none of our
# Debian libraries (../shared/GPU.md); the repository itself travels with each device call, so the
# bundle holds binaries only. Writes .gpu/uvflow-gpu.tgz, or $BUNDLE when set (so that people
# sharing a checkout do not overwrite each other's; keep it in a folder git ignores and name that
# folder in the device tool's `carry`). On the device, from the repository root:
#   tar xzf .gpu/uvflow-gpu.tgz -C /tmp && export UVFLOW_SOURCE_DIR=$PWD
#   /tmp/uvflow-gpu/run uvflow run pipelines/dirty_image_gpu.yaml
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
stage=$(mktemp -d)
bundle=${BUNDLE:-.gpu/uvflow-gpu.tgz}
mkdir -p "$(dirname "$bundle")"
bins=("$build/uvflow")
for t in "$build"/tests/*_test "$build"/bench/*; do
  [[ -f $t && -x $t ]] && bins+=("$t")
done
extra=()
for so in "$build"/tests/plugins/*.so; do extra+=(-l "$so"); done
../shared/tools/bundle-libs.sh -o "$stage/uvflow-gpu" "${extra[@]}" "${bins[@]}"
# The commit the binaries come from (with -dirty for uncommitted changes), for the benchmark reports.
git describe --always --dirty --abbrev=7 >"$stage/uvflow-gpu/COMMIT"
tar czf "$bundle" -C "$stage" uvflow-gpu && rm -rf "$stage"
du -h "$bundle"
