#!/usr/bin/env bash
# Configures and builds uvflow (Release) in build/. Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >build.configure.log || { cat build.configure.log; exit 1; }
grep -E "uvflow: CUDA" build.configure.log || true
cmake --build build -j"$(nproc)"
