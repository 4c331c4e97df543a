#!/usr/bin/env bash
# Packs crown's GPU checks for a lent GPU machine that cannot build crown
# (its image has CUDA, PyTorch and CMake, no MPI, Boost or spdlog that
# /work/.library/device/KINDS.md lists, and no package registry): the check binaries from a build here (CUDA and NCCL compile
# here without a driver), every library they load but the C library, the
# CUDA driver and NCCL, and Open MPI's runtime (mpirun, its components, its
# help texts), relocated through OPAL_PREFIX. run_kit.sh runs it there.
#
#   bench/gpu/make_kit.sh [BUILD_DIR [OUT_DIR]]   # default build/ and gpu-kit/
#
# writes OUT_DIR/crown-gpu-kit.tar.gz (about 26 MB: stripped, then gzipped,
# to travel within the device tool's 64 MiB). Then, with the device tool:
# run(command="bash bench/gpu/run_kit.sh", carry=["gpu-kit"]). gpu-kit/ is
# ignored by git.
# NCCL (200+ MiB) is not packed: run_kit.sh takes the machine's own (its
# PyTorch's nvidia-nccl wheel, or the system's).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
out=${2:-$root/gpu-kit}
kit=$(mktemp -d)
trap 'rm -rf "$kit"' EXIT
multiarch=$(gcc -print-multiarch)
ompi_lib=/usr/lib/$multiarch/openmpi/lib
pmix_dir=/usr/lib/$multiarch/pmix2

mkdir -p "$kit/bin" "$kit/lib" "$kit/lib-fallback" "$kit/ompi/bin" "$kit/ompi/share"

echo "== the check binaries from $build, stripped"
for name in crown_cuda_test mpi_nccl_test mpi_rdma_gpu_test gpu_allreduce rdma_gpu_bench; do
  found=$(find "$build" -path "$build/CMakeFiles" -prune -o -type f -name "$name" -perm -u+x -print |
    head -1)
  [[ -n $found ]] || { echo "no $name under $build: build with CUDA and NCCL (launch/build)" >&2; exit 1; }
  strip -o "$kit/bin/$name" "$found"
done

echo "== Open MPI's runtime, laid out under a prefix (OPAL_PREFIX)"
# ompi_info --path all: libdir and pkglibdir sit below the prefix this way.
mkdir -p "$kit/ompi/lib/$multiarch/openmpi/lib/openmpi3"
cp /usr/bin/orterun "$kit/ompi/bin/mpirun"
cp /usr/bin/orted "$kit/ompi/bin/orted"
cp -r /usr/share/openmpi "$kit/ompi/share/openmpi"
# The components that the system's /etc/openmpi/openmpi-mca-params.conf
# leaves on, without the fabric ones that need InfiniBand, UCX or libfabric.
for component in "$ompi_lib"/openmpi3/*.so; do
  case $(basename "$component") in
    *ucx* | *ofi* | *openib* | *uct* | *verbs* | *psm* | *usnic* | *portals* | *java*) continue ;;
  esac
  cp "$component" "$kit/ompi/lib/$multiarch/openmpi/lib/openmpi3/"
done
# PMIx, which Open MPI's pmix component loads, relocates through
# PMIX_PREFIX (run_kit.sh): its components and help texts.
mkdir -p "$kit/pmix2/lib"
cp -r "$pmix_dir/lib/pmix" "$kit/pmix2/lib/"
cp -r "$pmix_dir/share" "$kit/pmix2/"
cp /etc/openmpi/openmpi-mca-params.conf "$kit/ompi/mca-params.conf"

echo "== the libraries all of them load"
# Not the C library's own (the machine's is newer), the CUDA driver's, nor
# NCCL. libstdc++ and libgcc_s go to lib-fallback: run_kit.sh uses them only
# where the machine's are older than this compiler's.
skip='^(libc|libm|libpthread|libdl|librt|libresolv|libutil|ld-linux-x86-64|linux-vdso|libcuda|libnvidia-.*|libnccl)\.so'
fallback='^(libstdc\+\+|libgcc_s)\.so'
elves=$(find "$kit/bin" "$kit/ompi/bin" "$kit/ompi/lib" "$kit/pmix2" -type f \( -name '*.so' -o -perm -u+x \))
missing=0
while read -r soname path; do
  if [[ $path == "not" ]]; then
    echo "  not found here: $soname" >&2
    missing=1
    continue
  fi
  [[ $soname =~ $skip ]] && continue
  target=$kit/lib
  [[ $soname =~ $fallback ]] && target=$kit/lib-fallback
  [[ -e $target/$soname ]] || cp -L "$path" "$target/$soname"
done < <(for elf in $elves; do ldd "$elf" 2>/dev/null; done | awk '/=>/ {print $1, $3}' | sort -u)
[[ $missing -eq 0 ]] || { echo "some libraries are missing here" >&2; exit 1; }
strip --strip-unneeded "$kit"/lib/*.so* 2>/dev/null || true

rm -rf "$out"
mkdir -p "$out"
tar -C "$kit" -czf "$out/crown-gpu-kit.tar.gz" .
echo "kit ready: $(du -h "$out/crown-gpu-kit.tar.gz" | cut -f1) in $out/crown-gpu-kit.tar.gz" \
  "(unpacked $(du -sh "$kit" | cut -f1)); there: bash bench/gpu/run_kit.sh, carrying gpu-kit"
