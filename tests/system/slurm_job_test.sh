#!/usr/bin/env bash
# SlurmJob against real Slurm (issue 46): a private cluster of two simulated
# hosts (tests/support/slurm_netns_cluster.sh: a slurmd per network and UTS
# namespace), and the clients of python/tests/test_slurm_job.py, which run
# here, on neither host, and apply, reuse, replace and kill served crown
# jobs there, attaching over TCP. The jobs' controllers listen on the first
# node's address (the simulated hosts' names resolve nowhere), and each
# namespace gets a route to this machine's own addresses alone, where the
# clients listen. Everything the test made is gone at the end: its jobs,
# daemons, namespaces and files.
# Usage: slurm_job_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1
build_dir=$2
work=$(mktemp -d /tmp/crown-slurm-job.XXXXXX)
chmod 700 "$work"
source "$source_dir/tests/support/slurm_netns_cluster.sh"
cleanup() {
  set +e
  trap '' TERM INT  # a second TERM (timeout's, to the group) must not cut the cleanup short
  slurm_netns_cluster_stop
  rm -rf "$work"
}
trap cleanup EXIT

slurm_netns_cluster_start "$work" 2 4 || exit 1
bridge=${slurm_netns_cluster_subnet%.0/24}.1
for ns in $(ip netns list | awk '{print $1}' | grep "^${_slurm_netns_cluster_tag}-"); do
  for address in $(ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1); do
    [[ "$address" == "${slurm_netns_cluster_subnet%.0/24}".* ]] && continue
    ip -n "$ns" route add "$address/32" via "$bridge"
  done
done
export CROWNRUN="$source_dir/launch/crownrun" SLURM_JOB_TEST_DIR="$work/client" HOME="$work/home"
export CROWN_DEBUG_TCP="${slurm_netns_cluster_addrs[0]}:0"  # the first node's, where rank 0 runs
mkdir -m 700 "$SLURM_JOB_TEST_DIR" "$HOME"
export PYTHONPATH="$build_dir/python" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
/usr/bin/python3 -m pytest -p no:cacheprovider -q --rootdir "$source_dir/python/tests" \
  --confcutdir "$source_dir/python/tests" "$source_dir/python/tests/test_slurm_job.py" \
  ${SLURM_JOB_TEST_ARGS:-}
echo "slurm_job_test: PASS"
