#!/usr/bin/env bash
# Fresh machine to first image: installs what is missing, builds, runs the default pipeline.
# Writes out/dirty.fits (open it in DS9 or CARTA) and out/dirty.png.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
./build/uvflow run pipelines/dirty_image.yaml "$@"
