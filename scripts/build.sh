#!/usr/bin/env bash
# Configures and builds uvflow (Release) in build/. Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >build.configure.log || { cat build.configure.log; exit 1; }
grep -E "uvflow: CUDA" build.configure.log || true
cmake --build build -j"$(nproc)"
# `import uvflow` for the interpreter the module was built for (docs/python.md): a .pth in its user
# site-packages names build/python.
if py=$(sed -n 's/^UVFLOW_PYTHON_EXECUTABLE:[A-Z]*=//p' build/CMakeCache.txt) && [[ -n $py && -d build/python/uvflow ]]; then
  site=$("$py" -m site --user-site) && mkdir -p "$site" && echo "$PWD/build/python" >"$site/uvflow.pth"
fi
