#!/usr/bin/env bash
# RDMA buffers across simulated hosts (issue 12): three network namespaces on
# a bridge (as netns_test.sh makes them), one rank on each, so every transfer
# crosses TCP. One-sided MPI goes over osc pt2pt (the only one-sided
# component Open MPI has over TCP), which progresses at the target only
# while the target is inside MPI: the owners' service threads must keep
# calling MPI for the reads and writes to finish. Runs the mpi.rdma program
# (reads, writes, drops, timeouts) there, then, when given, the RDMA bench.
# Every process and namespace it made is removed. Needs root.
# Usage: rdma_netns_test.sh SOURCE_DIR PROGRAM [BENCH]
set -euo pipefail
source_dir=$1
program=$2
bench=${3:-}
tag=rd$$
work=$(mktemp -d /tmp/crown-rdma-netns.XXXXXX)
chmod 755 "$work"
source "$source_dir/tests/support/netns_hosts.sh"

cleanup() {
  set +e
  netns_hosts_down "$tag"
  rm -rf "$work"
}
trap cleanup EXIT
netns_hosts_up "$tag" 1 "$work"

launch() {  # launch RANKS PROGRAM...: on the namespace hosts, one-sided MPI over TCP
  local ranks=$1; shift
  # The namespaces share this machine's kernel, so a single copy
  # (process_vm_readv) would reach across them: MPI must move the bytes.
  CROWN_RDMA_SAME_HOST=mpi CROWN_TEST_EXPECT_SINGLE_COPY=0 timeout -k 5 240 "$source_dir/launch/crownrun" -n "$ranks" --hostfile "$hostfile" \
    --mca plm_rsh_agent "$agent" --mca oob_tcp_if_include "$subnet/24" \
    --mca btl_tcp_if_include "$subnet/24" --mca btl self,tcp --mca osc pt2pt \
    --mca orte_base_help_aggregate 0 "$@"
}

echo "== mpi.rdma on 3 hosts, one rank each, osc pt2pt over TCP"
launch 3 "$program" 2>&1 | tee "$work/out.log"
grep -q "crown-test: PASS" "$work/out.log" || { echo "FAIL: the RDMA tests failed across hosts"; exit 1; }
grep -q "rdma test: 3 ranks on 3 host(s)" "$work/out.log" || { echo "FAIL: the ranks were not on 3 hosts"; exit 1; }
if [[ -n "$bench" ]]; then
  echo "== rdma_bench between two hosts (reported, no goal)"
  launch 2 "$bench" "$work/rdma_hosts.json" 2>&1 | tee "$work/bench.log"
  grep -q "4 KiB read latency" "$work/bench.log" || { echo "FAIL: the bench did not finish"; exit 1; }
fi
echo "rdma_netns_test: PASS"
