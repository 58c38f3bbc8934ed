#!/usr/bin/env bash
# Packs Debian's Open MPI (mpirun, orted, libmpi, its plugins and PMIx's, help texts, and every
# library they load) for the lent GPU machine, which has none: writes .gpu/openmpi.tgz. On the
# device, from the repository root:
#   tar xzf .gpu/openmpi.tgz -C /tmp && source /tmp/openmpi/env.sh
#   mpirun --allow-run-as-root -np 4 /tmp/uvflow-gpu/run uvflow run PIPELINE.yaml
# Open MPI finds its tree from OPAL_PREFIX (its install paths under /usr, moved under
# /tmp/openmpi), PMIx its plugins from PMIX_MCA_mca_base_component_path.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=$(mktemp -d)
root=$stage/openmpi
arch=x86_64-linux-gnu
mkdir -p "$root/bin" "$root/lib/$arch" "$root/share"
cp -L /usr/bin/orterun /usr/bin/orted "$root/bin/"
ln -s orterun "$root/bin/mpirun"
cp -a "/usr/lib/$arch/openmpi" "$root/lib/$arch/"
cp -a "/usr/lib/$arch/pmix2" "$root/lib/$arch/"
cp -a /usr/share/openmpi "$root/share/"
[ -d /usr/share/pmix ] && cp -a /usr/share/pmix "$root/share/"
# What the binaries and every plugin load (plugins are dlopen'ed, so ldd of the binaries misses them).
plugins=()
while IFS= read -r so; do plugins+=(-l "$so"); done < <(find "/usr/lib/$arch/openmpi/lib/openmpi3" "/usr/lib/$arch/pmix2/lib/pmix" -name '*.so')
../shared/tools/bundle-libs.sh -o "$stage/deps" "${plugins[@]}" /usr/bin/orterun /usr/bin/orted >/dev/null
mv "$stage/deps/lib" "$root/deplib"
cat >"$root/env.sh" <<'ENV'
# Sourced on the device: the relocated Open MPI first on PATH and the library path.
export OPAL_PREFIX=/tmp/openmpi
export PATH=/tmp/openmpi/bin:$PATH
export LD_LIBRARY_PATH=/tmp/openmpi/deplib:/tmp/openmpi/lib/x86_64-linux-gnu/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PMIX_MCA_mca_base_component_path=/tmp/openmpi/lib/x86_64-linux-gnu/pmix2/lib/pmix
export PMIX_INSTALL_PREFIX=/tmp/openmpi
export OMPI_MCA_mca_base_component_show_load_errors=0
export PMIX_MCA_pcompress_base_silence_warning=1  # no zlib plugin there; nothing large goes through PMIx
ENV
mkdir -p .gpu
tar czf .gpu/openmpi.tgz -C "$stage" openmpi && rm -rf "$stage"
du -h .gpu/openmpi.tgz
