#!/usr/bin/env bash
# The GPU checks of crown's NCCL path and of RDMA buffers of GPU memory, as
# one script for a GPU machine that has crown's build dependencies
# (launch/install-deps): configure and build only what the checks need,
# then run them (bench/gpu/checks.sh: the gpu-labelled tests, the allreduce
# benchmark of CUDA tensors through the C++ TensorMesh API and the RDMA
# bandwidth of GPU memory). A lent machine without them (no MPI, no Boost)
# runs the kit that bench/gpu/make_kit.sh packs here instead.
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
status=0
step() { echo; echo "== $* ($(date +%T))"; }

step "configure (CUDA and NCCL forced on: missing ones fail here, loudly)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPython3_EXECUTABLE=/usr/bin/python3 -DCROWN_WITH_CUDA=ON -DCROWN_WITH_NCCL=ON \
  -DCROWN_WITH_PYTHON=OFF >"$build.configure.log" 2>&1 ||
  { tail -40 "$build.configure.log"; echo "FAIL: configure"; exit 1; }
grep "crown: CUDA" "$build.configure.log"

step "build (-j$jobs): the gpu tests, gpu_allreduce, rdma_gpu_bench"
ninja -C "$build" -j "$jobs" crown_cuda_test mpi_nccl_test mpi_rdma_gpu_test gpu_allreduce \
  rdma_gpu_bench ||
  { echo "FAIL: build"; exit 1; }

step "the checks (bench/gpu/checks.sh)"
"$root/bench/gpu/checks.sh" "$build" "$build/results" || status=1

step "done: $([[ $status -eq 0 ]] && echo PASS || echo FAIL)"
if [[ -n ${OUT:-} ]]; then
  cp "$log" "$OUT/run_gpu_checks.log"
  cp "$build"/results/*.json "$OUT/" 2>/dev/null || true
fi
exit $status
