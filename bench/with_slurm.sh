#!/usr/bin/env bash
# Runs COMMAND beside a private Slurm cluster on this machine (one node, CPUS
# CPUs, tests/support/slurm_cluster.sh) with SLURM_CONF exported, so that
# `srun --mpi=pmix -n 4 ...` inside it works; the cluster and its temporary
# directory go when it ends, whatever way. Exits with COMMAND's code (1 if the
# cluster did not come up). The cluster's progress goes to stderr, stdout is
# COMMAND's alone. As root, like the cluster's daemons.
#   bench/with_slurm.sh COMMAND...   e.g. bench/with_slurm.sh srun --mpi=pmix -n 2 hostname
#   CPUS=16 bench/with_slurm.sh ...  (default 8)
# COMMAND runs in the foreground: a signal sent to this script alone is acted
# on once COMMAND ends; send it to the process group (as timeout(1) does).
set -uo pipefail
if (($# == 0)); then
  echo "usage: $0 COMMAND..." >&2
  exit 2
fi
source "$(dirname "${BASH_SOURCE[0]}")/../tests/support/slurm_cluster.sh"
work=$(mktemp -d /tmp/crown-bench-slurm.XXXXXX) || exit 1
chmod 755 "$work"
cleanup() {
  slurm_cluster_stop
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
slurm_cluster_start "$work" "${CPUS:-8}" >&2 || exit 1
"$@"
exit $?
