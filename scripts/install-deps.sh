#!/usr/bin/env bash
# Installs the Debian packages uvflow builds and tests with; does nothing when all are present.
# Usage: scripts/install-deps.sh [--tests]   (--tests adds what only the test suite needs)
set -euo pipefail

pkgs=(build-essential cmake pkg-config
      libtbb-dev libeigen3-dev libfftw3-dev libyaml-cpp-dev libgtest-dev
      libcfitsio-dev casacore-dev libcli11-dev libspdlog-dev libfmt-dev libpng-dev nlohmann-json3-dev
      pybind11-dev python3-dev python3-numpy  # the Python module (docs/python.md)
      libopenmpi-dev openmpi-bin)  # distributed runs, mpirun (docs/distributed.md; optional: UVFLOW_MPI)
if [[ ${1:-} == --tests ]]; then
  pkgs+=(wsclean casacore-data python3-casacore python3-numpy python3-astropy python3-pytest)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo=; ((EUID == 0)) || sudo=sudo
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
