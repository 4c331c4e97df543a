#!/usr/bin/env bash
# Runs one Python benchmark under each way users launch crown, alternating,
# and prints each one's headline figures with their range (issue 45):
#   mpirun          plain mpirun (glibc's malloc as it comes)
#   mpirun-keep     plain mpirun with CROWN_MALLOC=keep (glibc's malloc set to
#                   keep what it frees: bootstrap/malloc_policy.h)
#   crownrun        launch/crownrun (tcmalloc preloaded)
#   srun            srun --mpi=pmix, in a private Slurm cluster started for
#                   the run (bench/with_slurm.sh); with --srun only
# Usage (from the repository root, after building into build/):
#   bench/launchers.sh [-n RANKS] [--rounds R] [--srun] [--only L1,L2] BENCH.py [ARGS...]
# Each run's JSON goes to $CROWN_BENCH_LAUNCHERS_DIR (default a temporary
# directory, kept) as BENCH.LAUNCHER.ROUND.json; bench/launchers_summary.py
# prints the table.
set -euo pipefail
cd "$(dirname "$0")/.."

ranks=4
rounds=3
with_srun=0
only=""
while (($#)); do
  case "$1" in
    -n) ranks=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --srun) with_srun=1; shift ;;
    --only) only=$2; shift 2 ;;
    -*) echo "launchers.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
(($#)) || { echo "usage: bench/launchers.sh [-n RANKS] [--rounds R] [--srun] BENCH.py [ARGS...]" >&2; exit 2; }
bench=$1
shift
name=$(basename "$bench" .py)
python=/usr/bin/python3
out=${CROWN_BENCH_LAUNCHERS_DIR:-$(mktemp -d /tmp/crown-launchers.XXXXXX)}
mkdir -p "$out"
export PYTHONPATH=$PWD/build/python
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

launchers=(mpirun mpirun-keep crownrun)
((with_srun)) && launchers+=(srun)
if [[ -n "$only" ]]; then IFS=, read -r -a launchers <<<"$only"; fi

run() {  # run LAUNCHER RESULT_FILE
  local launcher=$1 result=$2
  shift 2
  case "$launcher" in
    mpirun)
      CROWN_BENCH_RESULTS=$result mpirun --oversubscribe -n "$ranks" -x PYTHONPATH \
        -x CROWN_BENCH_RESULTS "$python" "$bench" "$@" ;;
    mpirun-keep)
      CROWN_MALLOC=keep CROWN_BENCH_RESULTS=$result mpirun --oversubscribe -n "$ranks" \
        -x PYTHONPATH -x CROWN_MALLOC -x CROWN_BENCH_RESULTS "$python" "$bench" "$@" ;;
    crownrun)
      CROWN_BENCH_RESULTS=$result launch/crownrun -n "$ranks" "$python" "$bench" "$@" ;;
    srun)
      CROWN_BENCH_RESULTS=$result bench/with_slurm.sh srun --mpi=pmix -n "$ranks" \
        --export=ALL "$python" "$bench" "$@" ;;
    *) echo "launchers.sh: unknown launcher $launcher" >&2; return 2 ;;
  esac
}

for round in $(seq "$rounds"); do
  for launcher in "${launchers[@]}"; do
    echo "== $name, round $round, $launcher"
    run "$launcher" "$out/$name.$launcher.$round.json" "$@" 2>&1 | tail -n 12
  done
done
"$python" bench/launchers_summary.py "$out"
