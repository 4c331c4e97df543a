#!/usr/bin/env bash
# Real Slurm on this machine: munged, slurmctld and slurmd from Debian's
# packages, configured in a temporary directory, with one node that claims 8
# CPUs (tests/support/slurm_cluster.sh). sbatch slurm/cpu.sbatch runs the C++ and the Python examples through
# `module load crown` and crownrun (srun --mpi=pmix) to completion; a job
# whose controller fails ends FAILED with exit code 1 in Slurm's record. A
# rank frozen for good (issue 43): the controller takes it for lost and ends,
# srun waits on it for ever, and crownrun ends the step within 30 s, naming
# the rank and its host, the job FAILED, and no process of it left behind.
# Usage: slurm_test.sh SOURCE_DIR BUILD_DIR [CROWNRUN]  (CROWNRUN: another
# crownrun to install in its place, to try an older one)
set -euo pipefail
source_dir=$1
build_dir=$2
other_crownrun=${3:-}
work=$(mktemp -d /tmp/crown-slurm.XXXXXX)
chmod 755 "$work"
source "$source_dir/tests/support/slurm_cluster.sh"
cleanup() {
  set +e
  if [[ -s "$work/frozen.pids" ]]; then kill -CONT $(cat "$work/frozen.pids") 2>/dev/null; fi
  slurm_cluster_stop  # this test's own cluster: its jobs and daemons alone
  if [[ -s "$work/frozen.pids" ]]; then kill -KILL $(cat "$work/frozen.pids") 2>/dev/null; fi
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
if [[ -n "$other_crownrun" ]]; then cp "$other_crownrun" "$work/prefix/bin/crownrun"; fi

slurm_cluster_start "$work" 8 || exit 1  # says why, with the daemons' logs

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

echo "== a rank and its slurmstepd frozen for good: crownrun ends the srun that waits on them"
frozen_py=$source_dir/tests/system/frozen_rank.py
(
  export CROWN_HEARTBEAT_INTERVAL_MS=200 CROWN_HEARTBEAT_MISSES=5 CROWN_LAUNCHER_GRACE_MS=5000
  sbatch --parsable --chdir="$source_dir" --output="$work/frozen.out" --ntasks-per-node=4 \
    --export=ALL,PROGRAM="python3 $frozen_py $work",MODULEPATH="$work/prefix/share/modulefiles" \
    "$source_dir/slurm/cpu.sbatch" >"$work/frozen.id" 2>"$work/frozen.sbatch.log"
) || fail "sbatch refused the frozen-rank job"
job=$(head -1 "$work/frozen.id")
for _ in $(seq 600); do
  [[ -s "$work/frozen.done" ]] && break
  [[ "$(job_field "$job" JobState)" == @(PENDING|RUNNING|CONFIGURING) ]] || break
  sleep 0.1
done
[[ -s "$work/frozen.done" ]] || fail "the controller never took the frozen rank for lost"
done_at=$(cut -d. -f1 "$work/frozen.done")
read -r rank2 stepd <"$work/frozen.pids"
crownrun_pid() { pgrep -f -- "crownrun -n 4 python3 $frozen_py" || true; }
while [[ -n "$(crownrun_pid)" ]] && (($(date +%s) - done_at <= 40)); do sleep 0.2; done
ended=$(($(date +%s) - done_at))
[[ -z "$(crownrun_pid)" ]] || fail "crownrun still running $ended s after the controller was done (bound: 30 s)"
echo "crownrun ended within $ended s of the controller"
((ended <= 30)) || fail "crownrun ended $ended s after the controller, over the bound of 30 s"
sleep 0.5
grep "^crownrun:" "$work/frozen.out" || true
grep -Eq "crownrun: .*lost [^ ]+ \(rank 2\); ending it" "$work/frozen.out" ||
  fail "crownrun did not name the frozen rank and its host"
left=""  # the ranks that crown reached, and srun: rank 2 and its daemon are the "unreachable host"
for pid in $(pgrep -f -- "$frozen_py" || true); do
  [[ "$pid" == "$rank2" || "$(ps -o stat= -p "$pid")" == Z* ]] || left+=" $pid"
done
[[ -z "$left" ]] || fail "left behind:$(ps -o pid=,stat=,args= -p "${left// /,}")"
echo "== the daemon continued: Slurm ends the job FAILED, with crownrun's code, and rank 2 with it"
kill -CONT "$stepd"
for _ in $(seq 600); do
  [[ "$(job_field "$job" JobState)" == @(RUNNING|COMPLETING) ]] || break
  sleep 0.1
done
cat "$work/frozen.out"
echo "job $job: JobState=$(job_field "$job" JobState) ExitCode=$(job_field "$job" ExitCode)"
[[ "$(job_field "$job" JobState)" == FAILED && "$(job_field "$job" ExitCode)" == 1:0 ]] ||
  fail "the job did not end FAILED with exit code 1"
sleep 1
[[ -z "$(pgrep -f -- "$frozen_py")" ]] || fail "left behind: $(pgrep -af -- "$frozen_py")"

echo "slurm_test: PASS"
