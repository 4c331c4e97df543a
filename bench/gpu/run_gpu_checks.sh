#!/usr/bin/env bash
# The GPU checks of crown's NCCL path and of RDMA buffers of GPU memory, as
# one script for a lent GPU machine (written for one H200 and 16 cores):
# configure and build only what the checks need, run the gpu-labelled tests,
# then the allreduce benchmark of CUDA tensors through the C++ TensorMesh
# API and the RDMA bandwidth of GPU memory (2 ranks sharing the GPUs).
#
#   bench/gpu/run_gpu_checks.sh            # from the repository root
#
# Environment: JOBS (build jobs, 16), CROWN_GPU_BUILD (build folder,
# build-gpu), OUT (if set, the log and the benchmark's JSON are copied there).
#
# NCCL takes one rank per GPU, so the rank count is the GPU count: on one
# GPU every collective is a group of one, and the benchmark measures crown's
# path around NCCL (dispatch, the engine's agreement over MPI, the stream
# wait) and the device-to-host copy, not a network.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${CROWN_GPU_BUILD:-$root/build-gpu}
jobs=${JOBS:-16}
log=$(mktemp)
exec > >(tee "$log") 2>&1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
step() { echo; echo "== $* ($(date +%T))"; }

step "the machine"
nvidia-smi -L || echo "nvidia-smi: none"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[[ ${gpus:-0} -ge 1 ]] || { echo "no GPU: the tests below will skip, saying so"; gpus=1; }
nproc

step "configure (CUDA and NCCL forced on: missing ones fail here, loudly)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPython3_EXECUTABLE=/usr/bin/python3 -DCROWN_WITH_CUDA=ON -DCROWN_WITH_NCCL=ON \
  -DCROWN_WITH_PYTHON=OFF -DCROWN_GPU_TEST_RANKS="$gpus" >"$build.configure.log" 2>&1 ||
  { tail -40 "$build.configure.log"; echo "FAIL: configure"; exit 1; }
grep "crown: CUDA" "$build.configure.log"

step "build (-j$jobs): the gpu tests, gpu_allreduce, rdma_gpu_bench"
ninja -C "$build" -j "$jobs" crown_cuda_test mpi_nccl_test mpi_rdma_gpu_test gpu_allreduce \
  rdma_gpu_bench ||
  { echo "FAIL: build"; exit 1; }

step "the gpu-labelled tests"
(cd "$build" && ctest -L gpu --output-on-failure --timeout 240) || status=1
# The skips say why (no device, fewer devices than ranks): show them.
grep -h "SKIPPED\|skipped" "$build"/Testing/Temporary/LastTest.log 2>/dev/null | head -20

step "allreduce of CUDA tensors, $gpus rank(s)"
mkdir -p "$build/results"
CROWN_BENCH_RESULTS="$build/results" timeout -k 5 300 \
  mpirun --oversubscribe -n "$gpus" -x CROWN_BENCH_RESULTS "$build/bench/gpu_allreduce" \
  --max-mib 256 --iters 20 || status=1

step "RDMA of GPU memory, 2 ranks"
CROWN_BENCH_RESULTS="$build/results" timeout -k 5 300 \
  mpirun --oversubscribe -n 2 -x CROWN_BENCH_RESULTS "$build/bench/rdma_gpu_bench" || status=1

step "done: $([[ $status -eq 0 ]] && echo PASS || echo FAIL)"
if [[ -n ${OUT:-} ]]; then
  cp "$log" "$OUT/run_gpu_checks.log"
  cp "$build"/results/*.json "$OUT/" 2>/dev/null || true
fi
exit $status
