#!/usr/bin/env bash
# Runs CMD, then fails if any process whose command line matches PATTERN
# (pgrep -f) outlived it by a second: SHT-1, no process is left behind.
# Those found are named, continued and killed by pid.
#   left_behind.sh PATTERN -- CMD...
set -u
pattern=$1
shift 2
"$@"
rc=$?
sleep 1
left=$(pgrep -f -- "$pattern" | tr '\n' ' ')
if [[ -n $left ]]; then
  echo "left behind: $left"
  ps -o pid,ppid,pgid,etime,args -p "$(echo $left | tr " " ",")"
  kill -CONT $left 2>/dev/null
  kill -KILL $left 2>/dev/null
  exit 1
fi
exit $rc
