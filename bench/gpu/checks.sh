#!/usr/bin/env bash
# The GPU checks themselves, on binaries already built: the gpu-labelled
# tests (as tests/CMakeLists.txt and tests/mpi/CMakeLists.txt run them),
# the allreduce benchmark of CUDA tensors through the C++ TensorMesh API,
# and the RDMA bandwidth of GPU memory. Both ways of reaching a GPU machine
# end here: run_gpu_checks.sh after building there, run_kit.sh with the
# kit that make_kit.sh packed on a machine that builds.
#
#   bench/gpu/checks.sh BIN_DIR RESULTS_DIR
#
# BIN_DIR holds (at any depth) crown_cuda_test, mpi_nccl_test,
# mpi_rdma_gpu_test, gpu_allreduce and rdma_gpu_bench; `mpirun` is the
# first on PATH. Prints PASS or FAIL last; exits 0 only on PASS.
set -uo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 BIN_DIR RESULTS_DIR" >&2; exit 2; }
bins=$1
results=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
check=$root/tests/support/mpirun_check.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$results"
status=0
step() { echo; echo "== $* ($(date +%T))"; }
binary() { find "$bins" -type f -name "$1" -perm -u+x | head -1; }
cuda_test=$(binary crown_cuda_test)
nccl_test=$(binary mpi_nccl_test)
rdma_test=$(binary mpi_rdma_gpu_test)
allreduce=$(binary gpu_allreduce)
rdma_bench=$(binary rdma_gpu_bench)
for found in "$cuda_test" "$nccl_test" "$rdma_test" "$allreduce" "$rdma_bench"; do
  [[ -n $found ]] || { echo "FAIL: a check binary is missing under $bins" >&2; exit 1; }
done

step "the machine"
nvidia-smi -L || echo "nvidia-smi: none"
# NCCL takes one rank per GPU: the multi-rank checks run one per device.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
device=yes
[[ ${gpus:-0} -ge 1 ]] || { echo "no GPU: the checks below skip, saying so"; gpus=1; device=no; }
echo "cores: $(nproc); mpirun: $(command -v mpirun)"

step "crown_cuda_test (no MPI)"
timeout -k 5 240 "$cuda_test" || status=1

step "mpi.nccl_collectives, $gpus rank(s)"
"$check" --timeout 180 --expect "crown-test: PASS" -- mpirun --oversubscribe -n "$gpus" "$nccl_test" ||
  status=1

step "mpi.nccl_without_device, 2 ranks (skips where there is a device)"
"$check" --timeout 120 --expect "crown-test: PASS" -- mpirun --oversubscribe -n 2 "$nccl_test" \
  --gtest_filter='NcclWithoutDevice.*' || status=1

step "mpi.rdma_gpu, 2 ranks"
"$check" --timeout 180 --expect "crown-test: PASS" -- mpirun --oversubscribe -n 2 "$rdma_test" ||
  status=1

step "allreduce of CUDA tensors, $gpus rank(s)"
CROWN_BENCH_RESULTS="$results" timeout -k 5 300 mpirun --oversubscribe -n "$gpus" \
  -x CROWN_BENCH_RESULTS "$allreduce" --max-mib 256 --iters 20 || status=1

step "RDMA of GPU memory, 2 ranks"
if [[ $device == yes ]]; then
  CROWN_BENCH_RESULTS="$results" timeout -k 5 300 mpirun --oversubscribe -n 2 \
    -x CROWN_BENCH_RESULTS "$rdma_bench" || status=1
else
  echo "rdma_gpu_bench: skipped: no GPU here"
fi

step "done: $([[ $status -eq 0 ]] && echo PASS || echo FAIL)"
exit $status
