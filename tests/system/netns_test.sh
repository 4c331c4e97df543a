#!/usr/bin/env bash
# Three simulated hosts: network namespaces on a bridge, each process in its
# own UTS namespace with its own host name (Open MPI's shared-memory
# transport crashes when two "hosts" share one). crownrun --hostfile starts
# 2 ranks on each through an rsh agent that enters the namespace. The world
# mesh is {hosts=3, procs=2}, a cast reaches every rank, and when host 2's
# link is cut for good (no reset is sent) the controller reports its ranks
# lost within a bounded time, thanks to crown's heartbeats. MPI itself hangs
# on such a cut, so the job is killed once the controller has spoken; every
# process the test started is killed and every namespace removed.
# Only the addresses made here (a random 10.x.y.0/24) are ever used.
# Usage: netns_test.sh SOURCE_DIR PROGRAM
set -euo pipefail
source_dir=$1
program=$2
tag=cr$$
work=$(mktemp -d /tmp/crown-netns.XXXXXX)
chmod 755 "$work"
job=""
source "$source_dir/tests/support/netns_hosts.sh"

cleanup() {
  set +e
  [[ -n "$job" ]] && kill -9 -- -"$job" 2>/dev/null
  netns_hosts_down "$tag"
  rm -rf "$work"
}
trap cleanup EXIT

echo "== bridge $tag-br and three namespaces"
netns_hosts_up "$tag" 2 "$work"

echo "== crownrun --hostfile: 6 ranks on 3 hosts"
export CROWN_HEARTBEAT_INTERVAL_MS=200 CROWN_HEARTBEAT_MISSES=5
setsid "$source_dir/launch/crownrun" -n 6 --hostfile "$hostfile" \
  --mca plm_rsh_agent "$agent" --mca oob_tcp_if_include "$subnet/24" \
  --mca btl_tcp_if_include "$subnet/24" --mca btl self,vader,tcp \
  "$program" "$work" >"$work/out.log" 2>&1 &
job=$!
disown "$job"  # killed at the end; no job notice

wait_for() {  # wait_for FILE_OR_PATTERN SECONDS
  local deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    if [[ "$1" == /* ]]; then [[ -e "$1" ]] && return 0; else grep -q "$1" "$work/out.log" && return 0; fi
    kill -0 "$job" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
wait_for "$work/cut-now" 90 || { cat "$work/out.log"; echo "FAIL: the job never got ready to cut"; exit 1; }
echo "== cutting host 2's link"
ip link set "$tag-v2" down  # the bridge side: no reset reaches anyone
cut_at=$SECONDS
touch "$work/cut-done"
if ! wait_for "netns-test: PASS" 60; then
  cat "$work/out.log"
  echo "FAIL: the controller did not report host 2 lost"
  exit 1
fi
grep -E "^world|cast reached|lost after" "$work/out.log"
echo "reported within $((SECONDS - cut_at)) s of the cut"
echo "netns_test: PASS"
