#!/usr/bin/env bash
# Runs crown's GPU checks (checks.sh) from the kit that make_kit.sh packed,
# on a GPU machine that has no MPI or Boost of its own:
#
#   bash bench/gpu/run_kit.sh              # from the repository root, gpu-kit/ beside it
#
# It points the loader and Open MPI at the kit, takes NCCL from the machine
# (its PyTorch's nvidia-nccl wheel, or a system libnccl.so.2), and copies
# the log and the benchmarks' JSON to $OUT when that is set.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
packed=${CROWN_GPU_KIT:-$root/gpu-kit/crown-gpu-kit.tar.gz}
[[ -f $packed ]] || { echo "no kit at $packed: run bench/gpu/make_kit.sh first" >&2; exit 2; }
kit=$(mktemp -d)
results=$(mktemp -d)
trap 'rm -rf "$kit"' EXIT
tar -C "$kit" -xzf "$packed" || { echo "FAIL: cannot unpack $packed" >&2; exit 1; }
log=$results/run_kit.log
exec > >(tee "$log") 2>&1

nccl_dir() {
  local dir
  for python in python3 /usr/bin/python3; do
    dir=$("$python" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' \
      2>/dev/null) && [[ -e $dir/libnccl.so.2 ]] && { echo "$dir"; return; }
  done
  for dir in /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib64; do
    [[ -e $dir/libnccl.so.2 ]] && { echo "$dir"; return; }
  done
}
nccl=$(nccl_dir)
[[ -n $nccl ]] || { echo "FAIL: no libnccl.so.2 on this machine" >&2; exit 1; }
echo "NCCL from $nccl"

export LD_LIBRARY_PATH=$kit/lib:$nccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
loads() { loader=$("$kit/bin/crown_cuda_test" --gtest_list_tests 2>&1 >/dev/null); }
# This compiler's C++ runtime only where the machine's lacks what it needs.
# A C library older than the build machine's (glibc 2.36, Debian 12) cannot
# load the kit at all: say so, with the loader's words.
if ! loads; then
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$kit/lib-fallback
  echo "the kit does not load with this machine's libstdc++: trying the kit's own"
  loads || {
    echo "FAIL: the kit's binaries do not load here ($(ldd --version | head -1)): $loader" >&2
    exit 1
  }
fi
export PATH=$kit/ompi/bin:$PATH
# Both relocate through their install-dirs components' variables.
export OPAL_PREFIX=$kit/ompi PMIX_PREFIX=$kit/pmix2
export PMIX_PKGLIBDIR=$kit/pmix2/lib/pmix PMIX_PKGDATADIR=$kit/pmix2/share/pmix
export OMPI_MCA_mca_base_param_files=$kit/ompi/mca-params.conf
# mpirun's ranks get the same environment (one host: they inherit mpirun's).

"$root/bench/gpu/checks.sh" "$kit/bin" "$results"
status=$?
echo "log and results: $results"
if [[ -n ${OUT:-} ]]; then
  cp "$log" "$results"/*.json "$OUT/" 2>/dev/null || true
fi
exit $status
