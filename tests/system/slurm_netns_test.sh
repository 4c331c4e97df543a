#!/usr/bin/env bash
# Real Slurm over two simulated hosts (tests/support/slurm_netns_cluster.sh):
# each slurmd in a network namespace of its own on a bridge, under a host
# name of its own. An sbatch of 2 nodes x 2 tasks runs `srun --mpi=pmix` of
# mpi4py on 4 ranks: the ranks see two host names and an allreduce over both
# hosts gives 4 on each. Then crownrun (which takes srun --mpi=pmix inside
# Slurm) runs examples/python/counter.py on 4 ranks over the two hosts to its
# result, its world {hosts=2, procs=2}. About 22 s, much of it sbatch --wait's
# polling. Every step is bounded; the cluster's jobs, daemons, namespaces and
# bridge go at the end, whatever happened.
# Usage: slurm_netns_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$(CDPATH="" cd -- "${1:?usage: slurm_netns_test.sh SOURCE_DIR BUILD_DIR}" && pwd)
build_dir=$(CDPATH="" cd -- "${2:?usage: slurm_netns_test.sh SOURCE_DIR BUILD_DIR}" && pwd)
python=/usr/bin/python3
work=$(mktemp -d /tmp/crown-slurm-netns.XXXXXX)
chmod 755 "$work"
waiting=""  # the bounded sbatch --wait under way
source "$source_dir/tests/support/slurm_netns_cluster.sh"
cleanup() {
  set +e
  trap '' TERM INT  # timeout signals the script, then its process group: one cleanup, to its end
  [[ -n "$waiting" ]] && kill -TERM "$waiting" 2>/dev/null  # timeout passes it on to sbatch
  slurm_netns_cluster_stop  # this test's own cluster: its jobs, daemons and namespaces alone
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM  # timeout's signal: the cleanup still runs
trap 'exit 130' INT
fail() {
  echo "FAIL: $*"
  for log in "$work"/*.out "$work"/slurmd-*.log "$work"/slurmctld.log; do
    [[ -e "$log" ]] || continue
    echo "--- $log"
    tail -20 "$log"
  done
  exit 1
}

slurm_netns_cluster_start "$work" 2 4 || exit 1  # says why, with the daemons' logs
echo "nodes: ${slurm_netns_cluster_nodes[*]} (${slurm_netns_cluster_addrs[*]})"

# run_job NAME SECONDS BATCH_SCRIPT: an sbatch of 2 nodes x 2 tasks, to its
# end. In the background, waited for: a TERM (the caller's timeout) is taken
# at once, not when sbatch ends, and the cleanup cancels the job.
run_job() {
  local name=$1 seconds=$2 script=$3 code=0
  timeout -k 5 "$seconds" sbatch --parsable --wait --nodes=2 --ntasks-per-node=2 \
    --time=$(((seconds + 59) / 60)) --chdir="$work" --output="$work/$name.out" \
    --export=ALL,PYTHONPATH="$build_dir/python" "$script" >"$work/$name.id" 2>"$work/$name.sbatch.log" &
  waiting=$!
  wait "$waiting" || code=$?
  waiting=""
  return "$code"
}

echo "== sbatch: srun --mpi=pmix of mpi4py, 4 ranks on 2 hosts"
cat >"$work/mpi.sbatch" <<BATCH
#!/bin/bash
exec srun --mpi=pmix -n 4 $python -c "import socket, mpi4py.MPI as M; c = M.COMM_WORLD; print(c.rank, socket.gethostname(), c.allreduce(1), flush=True)"
BATCH
run_job mpi 120 "$work/mpi.sbatch" || fail "the MPI job failed: $(cat "$work/mpi.sbatch.log")"
cat "$work/mpi.out"
ranks=$(grep -cE "^[0-3] simnode[01] 4$" "$work/mpi.out" || true)
((ranks == 4)) || fail "$ranks of 4 ranks reported an allreduce of 4"
[[ "$(grep -E "^[0-3] " "$work/mpi.out" | cut -d' ' -f1 | sort -u | wc -l)" == 4 ]] || fail "not 4 distinct ranks"
hosts=$(grep -E "^[0-3] " "$work/mpi.out" | cut -d' ' -f2 | sort -u | tr '\n' ' ')
[[ "$hosts" == "simnode0 simnode1 " ]] || fail "the ranks saw hosts '$hosts', not simnode0 and simnode1"

echo "== sbatch: crownrun -n 4 examples/python/counter.py on 2 hosts"
cat >"$work/crown.sbatch" <<BATCH
#!/bin/bash
exec $source_dir/launch/crownrun -n 4 $python $source_dir/examples/python/counter.py
BATCH
run_job crown 180 "$work/crown.sbatch" || fail "the crown job failed: $(cat "$work/crown.sbatch.log")"
cat "$work/crown.out"
grep -q "^call: ValueMesh({hosts=2, procs=2}" "$work/crown.out" || fail "crown's world is not 2 hosts x 2 procs"
grep -q "^total: " "$work/crown.out" || fail "no total in the crown job's output"

echo "slurm_netns_test: PASS"
