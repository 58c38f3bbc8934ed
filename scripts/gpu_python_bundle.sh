#!/usr/bin/env bash
# Packs the Python module for the lent H100 machine, whose python3 (3.12, with NumPy 2, CuPy and
# pytest) is not the one the build here is for: _uvflow is compiled again for that Python from
# the build's objects, against pybind11 >= 2.12 (NumPy 2), and bundled with the libraries it loads
# (../shared/tools/bundle-libs.sh). Writes .gpu/uvflow-python.tgz (.gpu/ is ignored by git; name
# that file, not all of .gpu/, in the device tool's `carry`: 28 MB of the 64 MiB a call carries,
# and delete it after). On the device, from the repository root (docs/python.md):
#   mkdir -p /tmp/u && tar xzf .gpu/uvflow-python.tgz -C /tmp/u
#   PYTHONPATH=/tmp/u/python LD_LIBRARY_PATH=/tmp/u/lib UVFLOW_SOURCE_DIR=$PWD python3 -m pytest -m gpu python/tests/test_gpu.py
# Usage: PYTHON_INCLUDE=DIR PYBIND11_INCLUDE=DIR scripts/gpu_python_bundle.sh
#   PYTHON_INCLUDE   Python.h of the device's Python version (e.g. a pyenv 3.12's include/python3.12)
#   PYBIND11_INCLUDE pybind11 >= 2.12 headers (e.g. unpacked from its wheel: pybind11/include)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
: "${PYTHON_INCLUDE:?the include folder of the device Python}" "${PYBIND11_INCLUDE:?pybind11 >= 2.12 headers}"
abi=$(sed -n 's/.*PY_MINOR_VERSION[[:space:]]*\([0-9]*\).*/\1/p' "$PYTHON_INCLUDE/patchlevel.h" | head -1)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/python/uvflow" .gpu
so=$stage/python/uvflow/_uvflow.cpython-3$abi-x86_64-linux-gnu.so
objs=$build/python/CMakeFiles/uvflow_python.dir
# The build's own flags for _uvflow.cpp, with the other Python and pybind11 first.
flags=$(sed -n 's/^CXX_FLAGS = //p' "$objs/flags.make") defines=$(sed -n 's/^CXX_DEFINES = //p' "$objs/flags.make")
c++ $defines -I"$PWD" -isystem "$PYBIND11_INCLUDE" -isystem "$PYTHON_INCLUDE" -isystem /usr/local/cuda/include $flags \
    -c python/_uvflow.cpp -o "$stage/_uvflow.o"
c++ -shared -o "$so" "$stage/_uvflow.o" "$objs/__/cli/describe.cpp.o" "$objs/__/cli/errors.cpp.o" \
    "$build/libuvflow.so" $(sed -n 's/.*\.\.\/libuvflow\.so //p' "$objs/link.txt")
cp python/uvflow/__init__.py "$stage/python/uvflow/"
LD_LIBRARY_PATH=$PWD/$build ../shared/tools/bundle-libs.sh -o "$stage/bundle" "$so" >/dev/null
mv "$stage/bundle/lib" "$stage/lib"
tar czf .gpu/uvflow-python.tgz -C "$stage" lib python
du -h .gpu/uvflow-python.tgz
