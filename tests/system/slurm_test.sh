#!/usr/bin/env bash
# Real Slurm on this machine: munged, slurmctld and slurmd from Debian's
# packages, configured in a temporary directory, with one node that claims 8
# CPUs. sbatch slurm/cpu.sbatch runs the C++ and the Python examples through
# `module load crown` and crownrun (srun --mpi=pmix) to completion; a job
# whose controller fails ends FAILED with exit code 1 in Slurm's record.
# Usage: slurm_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1
build_dir=$2
work=$(mktemp -d /tmp/crown-slurm.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  set +e
  [[ -n "${SLURM_CONF:-}" ]] && scontrol shutdown >/dev/null 2>&1
  sleep 1
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  sleep 0.5
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for log in "$work"/*.log; do echo "--- $log"; tail -15 "$log"; done
  exit 1
}

echo "== install crown into $work/prefix (for module load crown)"
cmake --install "$build_dir" --prefix "$work/prefix" >"$work/install.log"

echo "== munged"
dd if=/dev/urandom of="$work/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge.key"
munged --force --foreground --socket="$work/munge.sock" --key-file="$work/munge.key" \
  --pid-file="$work/munged.pid" --log-file="$work/munged.log" --seed-file="$work/munge.seed" \
  >"$work/munged.out.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [[ -S "$work/munge.sock" ]] && break; sleep 0.1; done
[[ -S "$work/munge.sock" ]] || fail "munged did not start"

echo "== slurmctld and slurmd"
node=$(hostname)
port=$((20000 + RANDOM % 20000))
while ss -ltn | grep -Eq ":($port|$((port + 1))) "; do port=$((20000 + RANDOM % 20000)); done
mkdir -p "$work/state" "$work/spool"
cat >"$work/slurm.conf" <<CONF
ClusterName=crowntest
SlurmctldHost=$node
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge.sock
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
MinJobAge=600
SlurmdParameters=config_overrides
NodeName=$node CPUs=8 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$work/slurm.conf
slurmctld -D -i -f "$SLURM_CONF" >"$work/slurmctld.out.log" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" >"$work/slurmd.out.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  state=$(sinfo -h -N -o "%t" 2>/dev/null | head -1)
  [[ "$state" == idle ]] && break
  sleep 0.2
done
[[ "${state:-}" == idle ]] || fail "the node did not come up (state '${state:-none}')"
sinfo -N -o "%N %c %t"

submit() {  # submit NAME PROGRAM: runs slurm/cpu.sbatch to its end; prints the job id
  local name=$1 program=$2
  sbatch --parsable --wait --chdir="$source_dir" --output="$work/$name.out" --ntasks-per-node=4 \
    --export=ALL,PROGRAM="$program",MODULEPATH="$work/prefix/share/modulefiles" \
    "$source_dir/slurm/cpu.sbatch" >"$work/$name.id" 2>"$work/$name.sbatch.log"
}
job_field() {  # job_field JOB FIELD
  scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}

echo "== sbatch slurm/cpu.sbatch: the C++ example"
submit cpp "$build_dir/examples/mesh_cast" || fail "the C++ job failed: $(cat "$work/cpp.out")"
cat "$work/cpp.out"
grep -q "mesh_cast done on 4 ranks" "$work/cpp.out" || fail "no result in the C++ job's output"

echo "== sbatch slurm/cpu.sbatch: the Python example"
submit python "python3 examples/python/counter.py" || fail "the Python job failed: $(cat "$work/python.out")"
cat "$work/python.out"
grep -q "total: " "$work/python.out" || fail "no result in the Python job's output"

echo "== respawn under srun: refused, saying why and what to do instead"
submit respawn "python3 python/tests/respawn_refused.py" || fail "the respawn job failed: $(cat "$work/respawn.out")"
cat "$work/respawn.out"
grep -q "refused: CrownError: cannot replace lost ranks: this job was started by srun" "$work/respawn.out" ||
  fail "respawn under srun was not refused with the reason"
grep -q "still serving: " "$work/respawn.out" || fail "the job did not go on after the refusal"

echo "== a job whose controller fails"
if submit failing "$build_dir/tests/mpi/mpi_controller_fails"; then fail "a failing job succeeded"; fi
job=$(head -1 "$work/failing.id")
cat "$work/failing.out"
grep -q "the training loop diverged" "$work/failing.out" || fail "the failure is not in the output"
echo "job $job: JobState=$(job_field "$job" JobState) ExitCode=$(job_field "$job" ExitCode)"
[[ "$(job_field "$job" JobState)" == FAILED ]] || fail "job state is not FAILED"
[[ "$(job_field "$job" ExitCode)" == 1:0 ]] || fail "exit code is not 1:0"

echo "slurm_test: PASS"
