#!/usr/bin/env bash
# Issue 43, finding 5: a link cut between hosts must not leave the job
# running for ever. Three simulated hosts (tests/support/netns_hosts.sh),
# 6 ranks under crownrun --hostfile; host 2's link is cut for good during
# casts (no reset reaches anyone). crown names ranks 4 and 5 lost and every
# rank it can reach exits, but mpirun waits on host 2's unreachable daemon.
# Unlike netns_test.sh, nothing here helps the job end: crownrun itself must
# exit non-zero within 30 s of the controller's end (CROWN_LAUNCHER_GRACE_MS,
# default 20 s), name the lost host and ranks on stderr, and leave no crown
# process or orted in the reachable namespaces (hosts 0 and 1).
# Only the addresses made here (a random 10.x.y.0/24) are ever used.
# Usage: netns_cut_test.sh SOURCE_DIR PROGRAM [CROWNRUN]
set -euo pipefail
source_dir=$1
program=$2
crownrun=${3:-$source_dir/launch/crownrun}
bound=30
tag=cx$$
work=$(mktemp -d /tmp/crown-netns-cut.XXXXXX)
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
fail() {
  echo "--- stdout"; tail -30 "$work/out.log"
  echo "--- stderr"; tail -30 "$work/err.log"
  echo "FAIL: $*"
  exit 1
}

echo "== bridge $tag-br and three namespaces"
netns_hosts_up "$tag" 2 "$work"

echo "== crownrun --hostfile: 6 ranks on 3 hosts"
export CROWN_HEARTBEAT_INTERVAL_MS=200 CROWN_HEARTBEAT_MISSES=5
unset CROWN_LAUNCHER_GRACE_MS  # the default grace, as a user meets it
# In a session of its own (killed whole at the end), its exit code kept in rc.
CUT_RC=$work/rc setsid bash -c '"$0" "$@"; echo $? >"$CUT_RC"' "$crownrun" -n 6 --hostfile "$hostfile" \
  --mca plm_rsh_agent "$agent" --mca oob_tcp_if_include "$subnet/24" \
  --mca btl_tcp_if_include "$subnet/24" --mca btl self,vader,tcp \
  "$program" "$work" >"$work/out.log" 2>"$work/err.log" </dev/null &
job=$!
disown "$job"  # waited for by polling below; no job notice

wait_for() {  # wait_for FILE_OR_PATTERN SECONDS
  local deadline=$((SECONDS + $2))
  while ((SECONDS < deadline)); do
    if [[ "$1" == /* ]]; then [[ -e "$1" ]] && return 0; else grep -q "$1" "$work/out.log" && return 0; fi
    kill -0 "$job" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
wait_for "$work/cut-now" 90 || fail "the job never got ready to cut"
echo "== cutting host 2's link, for good"
ip link set "$tag-v2" down  # the bridge side: no reset reaches anyone
cut_at=$SECONDS
touch "$work/cut-done"
wait_for "netns-test: PASS" 60 || fail "the controller did not report host 2 lost"
done_at=$SECONDS
grep -E "^world|cast reached|lost after" "$work/out.log"
echo "the controller was done $((done_at - cut_at)) s after the cut; now nothing helps the job end"

# crownrun must end by itself: wait (by polling, it is no child of ours) up
# to the bound after the controller was done, and a little past it to see.
while kill -0 "$job" 2>/dev/null && ((SECONDS - done_at <= bound + 5)); do sleep 0.2; done
if kill -0 "$job" 2>/dev/null; then
  echo "still running: $(ps -o pid=,args= --ppid "$job" | head -3)"
  fail "crownrun still running $((SECONDS - done_at)) s after the controller was done (bound: $bound s)"
fi
ended=$((SECONDS - done_at))
echo "crownrun ended $ended s after the controller was done, exit code $(cat "$work/rc" 2>/dev/null)"
((ended <= bound)) || fail "crownrun took $ended s, over the bound of $bound s"
[[ -s "$work/rc" && "$(cat "$work/rc")" != 0 ]] || fail "crownrun's exit code is not non-zero"
grep "^crownrun:" "$work/err.log" || true
grep -q "crownrun: .*lost simhost2 (ranks 4 5)" "$work/err.log" || fail "crownrun did not name host 2 and its ranks on stderr"
grep -q "ending it" "$work/err.log" || fail "crownrun did not say it ended the launcher"

echo "== nothing left on the reachable hosts"
left=""
for _ in $(seq 50); do
  left=""
  for i in 0 1; do
    for pid in $(ip netns pids "$tag-$i"); do left+=" $pid:$(ps -o comm= -p "$pid" 2>/dev/null)"; done
  done
  for pid in $(pgrep -f -- "$program $work" || true); do
    # a rank of host 2 (unreachable: it ends on its own watchdog) is not counted
    [[ "$(ip netns identify "$pid" 2>/dev/null)" == "$tag-2" ]] || left+=" $pid:rank"
  done
  [[ -z "$left" ]] && break
  sleep 0.1
done
[[ -z "$left" ]] || fail "left behind on the reachable hosts:$left"
echo "none"
echo "netns_cut_test: PASS"
