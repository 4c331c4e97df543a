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
subnet="10.$((100 + RANDOM % 100)).$((RANDOM % 250)).0"
prefix=${subnet%.0}
work=$(mktemp -d /tmp/crown-netns.XXXXXX)
chmod 755 "$work"
job=""

cleanup() {
  set +e
  [[ -n "$job" ]] && kill -9 -- -"$job" 2>/dev/null
  for i in 0 1 2; do
    for pid in $(ip netns pids "$tag-$i" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    ip netns del "$tag-$i" 2>/dev/null
    ip link del "$tag-v$i" 2>/dev/null  # the pair goes with it
  done
  ip link del "$tag-br" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

echo "== bridge $tag-br on $subnet/24 and three namespaces"
ip link add "$tag-br" type bridge
ip addr add "$prefix.1/24" dev "$tag-br"
ip link set "$tag-br" up
hostfile=$work/hosts
for i in 0 1 2; do
  ns=$tag-$i
  ip netns add "$ns"
  ip link add "$tag-v$i" type veth peer name "$tag-p$i"
  ip link set "$tag-p$i" netns "$ns"
  ip link set "$tag-v$i" master "$tag-br" up
  ip -n "$ns" addr add "$prefix.$((10 + i))/24" dev "$tag-p$i"
  ip -n "$ns" link set "$tag-p$i" up
  ip -n "$ns" link set lo up
  echo "$prefix.$((10 + i)) slots=2" >>"$hostfile"
done

# The rsh agent: `agent HOST COMMAND...` runs COMMAND in HOST's namespace,
# under its own host name.
cat >"$work/agent" <<AGENT
#!/bin/bash
host=\$1; shift
[[ "\$1" == -* ]] && shift  # options ssh would take
i=\$(( \${host##*.} - 10 ))
exec ip netns exec $tag-\$i unshare --uts /bin/bash -c "hostname simhost\$i; exec \$*"
AGENT
chmod +x "$work/agent"

echo "== crownrun --hostfile: 6 ranks on 3 hosts"
export CROWN_HEARTBEAT_INTERVAL_MS=200 CROWN_HEARTBEAT_MISSES=5
setsid "$source_dir/launch/crownrun" -n 6 --hostfile "$hostfile" \
  --mca plm_rsh_agent "$work/agent" --mca oob_tcp_if_include "$subnet/24" \
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
