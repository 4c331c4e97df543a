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

if ((failures)); then
  echo "crownrun_test: $failures failed"
  exit 1
fi
echo "crownrun_test: PASS"
