#!/usr/bin/env bash
# SlurmJob against real Slurm (issue 46): a private one-node cluster
# (tests/support/slurm_cluster.sh) claiming 8 CPUs, and the clients of
# python/tests/test_slurm_job.py, which apply, reuse, replace and kill
# served crown jobs there. Everything the test made is gone at the end:
# its jobs (scancel by the cluster's stop), daemons and files.
# Usage: slurm_job_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1
build_dir=$2
work=$(mktemp -d /tmp/crown-slurm-job.XXXXXX)
chmod 700 "$work"
source "$source_dir/tests/support/slurm_cluster.sh"
cleanup() {
  set +e
  slurm_cluster_stop
  rm -rf "$work"
}
trap cleanup EXIT

slurm_cluster_start "$work" 8 || exit 1
export CROWNRUN="$source_dir/launch/crownrun" SLURM_JOB_TEST_DIR="$work/client" HOME="$work/home"
mkdir -m 700 "$SLURM_JOB_TEST_DIR" "$HOME"
export PYTHONPATH="$build_dir/python" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
/usr/bin/python3 -m pytest -p no:cacheprovider -q --rootdir "$source_dir/python/tests" \
  --confcutdir "$source_dir/python/tests" "$source_dir/python/tests/test_slurm_job.py" ${SLURM_JOB_TEST_ARGS:-}
echo "slurm_job_test: PASS"
