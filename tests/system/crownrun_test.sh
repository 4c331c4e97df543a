#!/usr/bin/env bash
# crownrun against the real mpirun: the job's exit code is the controller's
# outcome (even under --enable-recovery, where mpirun exits 0), and bad
# input gets a clear error. Usage: crownrun_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
source_dir=$1
build_dir=$2
crownrun=$source_dir/launch/crownrun
failures=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

check() {  # check NAME EXPECTED_RC REGEX -- COMMAND...
  local name=$1 expected=$2 regex=$3
  shift 4
  local output rc
  output=$("$@" 2>&1)
  rc=$?
  if [[ "$rc" != "$expected" ]] || ! grep -Eq -- "$regex" <<<"$output"; then
    echo "FAIL: $name: exit $rc (expected $expected), output:"
    sed 's/^/    /' <<<"$output" | tail -20
    failures=$((failures + 1))
  else
    echo "ok: $name"
  fi
}

check "a job that succeeds exits 0" 0 "mesh_cast done on 4 ranks" -- \
  "$crownrun" -n 4 "$build_dir/examples/mesh_cast"
check "a failing controller makes the job fail" 1 "the training loop diverged" -- \
  "$crownrun" -n 3 "$build_dir/tests/mpi/mpi_controller_fails"
check "a controller that dies makes the job fail" 1 "ended without a result" -- \
  "$crownrun" -n 4 "$build_dir/tests/mpi/mpi_controller_dies"
check "CROWN_* settings reach every rank" 0 "crown r2 debug\] bootstrap done" -- \
  env CROWN_LOG_LEVEL=debug "$crownrun" -n 3 "$build_dir/examples/mesh_cast"
check "dry run prints the launch command" 0 "^mpirun -n 6 --enable-recovery.*--oversubscribe.*-x CROWN_LOG_LEVEL.*mesh_cast prog" -- \
  env CROWN_LOG_LEVEL=info "$crownrun" -n 6 --dry-run --oversubscribe "$build_dir/examples/mesh_cast" prog
check "hosts are passed on" 0 "-H a.?,b" -- "$crownrun" -n 2 --hosts a,b --dry-run true
check "2 ranks are not bound to a core each" 0 "^mpirun -n 2 .*--bind-to none" -- \
  "$crownrun" -n 2 --dry-run true
check "more ranks keep Open MPI's binding" 0 "^mpirun -n 3 --enable-recovery( --allow-run-as-root)?( --oversubscribe)? -x" -- \
  "$crownrun" -n 3 --dry-run true
check "a binding asked for is passed on" 0 "^mpirun -n 2 .*--bind-to core " -- \
  "$crownrun" -n 2 --bind-to core --dry-run true
check "2 ranks unbound run their threads on any core" 0 "mesh_cast done on 2 ranks" -- \
  "$crownrun" -n 2 "$build_dir/examples/mesh_cast"
# The allocator: tcmalloc (launch/install-deps installs it) in every rank by
# default, none with --malloc system, and bad choices refused. Either way a
# tensor too large for the machine is refused at once (an error the engine
# reports), not killed by the OOM killer when touched.
cat >"$work/allocator.py" <<'PY'
import crown
import torch
from crown.actor import Actor, endpoint


class Probe(Actor):
    @endpoint
    def allocator(self):
        with open("/proc/self/maps") as maps:
            loaded = maps.read()
        name = next((n for n in ("tcmalloc", "jemalloc", "mimalloc") if f"lib{n}" in loaded), "system")
        try:
            torch.empty(2 ** 44, dtype=torch.uint8)  # 16 TiB
            return name + ", 16 TiB allocated"
        except RuntimeError as e:
            return name + (", 16 TiB refused" if "can't allocate memory" in str(e) else f": {e}")


def main():
    found = crown.world().spawn("probe", Probe).allocator.call().get()
    print("allocators:", sorted(set(found.values())), "on", len(list(found.values())), "ranks")


crown.run(main)
PY
python=${CROWN_PYTHON:-/usr/bin/python3}
export PYTHONPATH="$build_dir/python${PYTHONPATH:+:$PYTHONPATH}"
check "every rank runs tcmalloc by default, and refuses what does not fit" 0 \
  "allocators: \['tcmalloc, 16 TiB refused'\] on 3 ranks" -- "$crownrun" -n 3 "$python" "$work/allocator.py"
check "--malloc system preloads nothing" 0 "allocators: \['system, 16 TiB refused'\] on 2 ranks" -- \
  "$crownrun" -n 2 --malloc system "$python" "$work/allocator.py"
check "a preload of the user's own is kept after tcmalloc" 0 "LD_PRELOAD=[^ ]*libtcmalloc_minimal.so.4:$work/mine.so " -- \
  env LD_PRELOAD="$work/mine.so" "$crownrun" -n 2 --dry-run true
check "an unknown allocator" 2 "unknown --malloc 'tcmalloc9'" -- "$crownrun" -n 2 --malloc tcmalloc9 true
check "an allocator library that is not there" 2 "cannot read the library /no/such/libmalloc.so" -- \
  "$crownrun" -n 2 --malloc /no/such/libmalloc.so true

check "no rank count" 2 "say how many ranks" -- "$crownrun" true
check "N below 1" 2 "must be at least 1" -- "$crownrun" -n 0 true
check "program not found" 2 "program not found on PATH: no-such-program" -- \
  "$crownrun" -n 2 no-such-program
check "program path not executable" 2 "not found or not executable" -- \
  "$crownrun" -n 2 ./no/such/file

# No MPI launcher: a PATH with the basic tools but no mpirun.
mkdir -p "$work/bin"
for tool in bash env id nproc mktemp head tr rm grep; do ln -sf "$(command -v $tool)" "$work/bin/$tool"; done
check "no MPI launcher found" 2 "no MPI launcher found" -- env PATH="$work/bin" "$crownrun" -n 2 true

# Inside a Slurm allocation too small for N (a stand-in srun: only the check runs).
printf '#!/bin/sh\nexit 0\n' >"$work/bin/srun"
chmod +x "$work/bin/srun"
check "a Slurm allocation smaller than N" 2 "allocation has 2 tasks, fewer than the 4" -- \
  env PATH="$work/bin" SLURM_JOB_ID=7 SLURM_NTASKS=2 "$crownrun" -n 4 true
check "inside Slurm it launches with srun --mpi=pmix" 0 "^srun --mpi=pmix -n 2" -- \
  env PATH="$work/bin" SLURM_JOB_ID=7 SLURM_NTASKS=2 "$crownrun" -n 2 --dry-run true
check "inside Slurm the preload goes through srun --export" 0 "^srun .*--export=ALL.?,LD_PRELOAD=[^ ]*libtcmalloc_minimal.so.4 true" -- \
  env PATH="$work/bin" SLURM_JOB_ID=7 SLURM_NTASKS=2 "$crownrun" -n 2 --dry-run true

# The launcher outliving the controller's outcome (mpirun waiting on a cut
# host's daemon, srun on a frozen task; issue 43): stand-in launchers that
# write a result and then never end, even on TERM.
mkdir -p "$work/hang"
cat >"$work/hang/mpirun" <<'SH'
#!/bin/bash
echo $$ >"$HANG_PIDS"
printf '%s' "$HANG_RESULT" >"$CROWN_RESULT_FILE"
trap '' TERM INT HUP
sleep 300 &
echo $! >>"$HANG_PIDS"
while :; do sleep 0.1; done
SH
chmod +x "$work/hang/mpirun"
hang() {  # hang RESULT COMMAND...: runs COMMAND with the stand-in mpirun first on PATH
  local result=$1
  shift
  env PATH="$work/hang:$PATH" HANG_PIDS="$work/hang.pids" HANG_RESULT="$result" \
    CROWN_LAUNCHER_GRACE_MS=1000 "$@"
}
still_running() {  # fails when a stand-in's process outlived crownrun
  local pid
  sleep 0.2
  for pid in $(cat "$work/hang.pids"); do
    # a zombie is dead, waiting for its new parent to reap it
    [[ "$(ps -o stat= -p "$pid" 2>/dev/null)" == [^Z]* ]] && echo "left behind: $pid"
  done
  return 0
}
start=$SECONDS
check "a launcher that outlives the controller is ended, naming the lost hosts" 1 \
  "lost nodeb \(ranks 2 3\), nodec \(rank 5\); ending it" -- \
  hang $'0\nlost 2 nodeb\nlost 3 nodeb\nlost 5 nodec\n' "$crownrun" -n 6 true
check "... within the grace and the TERM-to-KILL bound" 0 "^$" -- \
  bash -c "((SECONDS - $start <= 10)) || echo 'took too long'; exit 0"
check "... leaving nothing behind" 0 "^$" -- still_running
check "... with the controller's code when it is not 0" 3 "lost nodeb \(rank 2\)" -- \
  hang $'3\nlost 2 nodeb\n' "$crownrun" -n 3 true
check "... and the old one-number result" 4 "still running 1 s later; ending it" -- \
  hang $'4\n' "$crownrun" -n 3 true
check "a bad grace is refused" 2 "CROWN_LAUNCHER_GRACE_MS must be a number" -- \
  env CROWN_LAUNCHER_GRACE_MS=soon "$crownrun" -n 2 true
# A TERM to crownrun ends the launcher (no result: the controller never spoke).
term_crownrun() {
  env PATH="$work/hang:$PATH" HANG_PIDS="$work/hang.pids" HANG_RESULT="" "$crownrun" -n 2 true &
  local pid=$! rc
  for _ in $(seq 50); do [[ -s "$work/hang.pids" ]] && break; sleep 0.1; done
  sleep 0.3
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  still_running
  return $rc
}
rm -f "$work/hang.pids"
check "a TERM to crownrun ends the launcher" 143 "signal TERM, ending the job" -- term_crownrun
check "... leaving nothing behind" 0 "^$" -- still_running

if ((failures)); then
  echo "crownrun_test: $failures failed"
  exit 1
fi
echo "crownrun_test: PASS"
