#!/usr/bin/env bash
# Fresh machine to passing tests: installs what is missing (test tools too), builds, runs every
# test. GPU tests skip cleanly on a machine without a CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --tests
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
