#!/usr/bin/env bash
# Runs a multi-rank command under a hard timeout and checks its outcome.
#   mpirun_check.sh [--timeout S] [--rc 0|nonzero|any] [--expect REGEX]... [--expect-count N REGEX]... -- CMD...
# Prints the command's output; exits 0 only when every check holds.
set -u
timeout_s=120
want_rc=0
expects=()
counts=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --timeout) timeout_s=$2; shift 2 ;;
    --rc) want_rc=$2; shift 2 ;;
    --expect) expects+=("$2"); shift 2 ;;
    --expect-count) counts+=("$2" "$3"); shift 3 ;;
    --) shift; break ;;
    *) echo "mpirun_check: unknown option $1" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
timeout -k 5 "$timeout_s" "$@" >"$out" 2>&1
rc=$?
cat "$out"
ok=1
if [[ $rc -eq 124 || $rc -eq 137 ]]; then
  echo "mpirun_check: FAIL: timed out after ${timeout_s}s"; ok=0
elif [[ $want_rc == nonzero && $rc -eq 0 ]]; then
  echo "mpirun_check: FAIL: exit code 0, expected non-zero"; ok=0
elif [[ $want_rc != nonzero && $want_rc != any && $rc -ne $want_rc ]]; then
  echo "mpirun_check: FAIL: exit code $rc, expected $want_rc"; ok=0
fi
for pattern in "${expects[@]}"; do
  grep -Eq -- "$pattern" "$out" || { echo "mpirun_check: FAIL: no line matches /$pattern/"; ok=0; }
done
for ((i = 0; i < ${#counts[@]}; i += 2)); do
  n=$(grep -Ec -- "${counts[i+1]}" "$out")
  [[ $n -eq ${counts[i]} ]] || { echo "mpirun_check: FAIL: /${counts[i+1]}/ matched $n lines, expected ${counts[i]}"; ok=0; }
done
[[ $ok -eq 1 ]] && echo "mpirun_check: ok (exit code $rc)"
[[ $ok -eq 1 ]]
