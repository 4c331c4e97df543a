# A private Slurm cluster on this machine, sourced: munged, slurmctld and
# slurmd from Debian's packages with a temporary key and socket, a random pair
# of ports nobody listens on, and one node (this host) that claims CPUS CPUs
# whatever it has (SlurmdParameters=config_overrides). Every file it makes is
# in WORKDIR; it touches no other file and, when stopping, only the daemons it
# started and the jobs of its own cluster. Runs as root (SlurmUser=root).
# munged, the settings and the stop it shares with slurm_netns_cluster.sh are
# slurm_daemons.sh's.
#   slurm_cluster_start WORKDIR [CPUS]  starts it (CPUS: 8), waits until the
#       node is idle and exports SLURM_CONF; on failure says why, shows the
#       tails of the daemons' logs and returns 1 (call slurm_cluster_stop
#       then too). Progress goes to stdout.
#   slurm_cluster_stop  cancels its jobs, shuts it down, ends its daemons
#       (TERM, then KILL) and puts SLURM_CONF back as it was; WORKDIR stays.
# Sets slurm_cluster_conf (the slurm.conf) and slurm_cluster_pids (the
# daemons' pids). Works with or without set -euo pipefail in the caller.
slurm_cluster_conf=""
slurm_cluster_pids=()
_slurm_cluster_dir=""
_slurm_cluster_saved_conf=""  # SLURM_CONF before start, to put back; "-" if unset
_slurm_cluster_shell=""
# shellcheck source=SCRIPTDIR/slurm_daemons.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm_daemons.sh"

slurm_cluster_start() {
  local - # errexit and the rest as the caller had them, on return
  set +e
  local dir=${1:?usage: slurm_cluster_start WORKDIR [CPUS]} cpus=${2:-8} node port state
  if [[ -n "$_slurm_cluster_dir" ]]; then
    echo "FAIL: a cluster is running already in $_slurm_cluster_dir (slurm_cluster_stop first)"
    return 1
  fi
  [[ "$cpus" =~ ^[1-9][0-9]*$ ]] || { echo "FAIL: slurm_cluster_start: CPUS '$cpus' is not a count"; return 1; }
  [[ -d "$dir" ]] || { echo "FAIL: slurm_cluster_start: no directory $dir"; return 1; }
  _slurm_cluster_dir=$(CDPATH="" cd -- "$dir" && pwd)
  dir=$_slurm_cluster_dir
  _slurm_cluster_shell=$BASHPID  # the daemons' parent
  _slurm_cluster_saved_conf=${SLURM_CONF--}

  _slurm_daemons_munged "$dir" slurm_cluster_pids || return 1

  echo "== slurmctld and slurmd"
  node=$(hostname)
  port=$(_slurm_daemons_port)
  mkdir -p "$dir/state" "$dir/spool"
  {
    _slurm_daemons_conf "$dir" crowntest "$node" "$port"
    cat <<CONF
SlurmdSpoolDir=$dir/spool
SlurmdPidFile=$dir/slurmd.pid
SlurmdLogFile=$dir/slurmd.log
NodeName=$node CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
  } >"$dir/slurm.conf"
  slurm_cluster_conf=$dir/slurm.conf
  export SLURM_CONF=$slurm_cluster_conf
  slurmctld -D -i -f "$SLURM_CONF" >"$dir/slurmctld.out.log" 2>&1 &
  slurm_cluster_pids+=($!)
  slurmd -D -f "$SLURM_CONF" >"$dir/slurmd.out.log" 2>&1 &
  slurm_cluster_pids+=($!)
  for _ in $(seq 100); do
    state=$(sinfo -h -N -o "%t" 2>/dev/null | head -1)
    [[ "$state" == idle ]] && break
    sleep 0.2
  done
  [[ "$state" == idle ]] || { _slurm_daemons_fail "$dir" "the node did not come up (state '${state:-none}')"; return 1; }
  sinfo -N -o "%N %c %t"
}

slurm_cluster_stop() {
  local - conf=$slurm_cluster_conf
  set +e
  [[ -n "$_slurm_cluster_dir" ]] || return 0
  _slurm_daemons_stop "$conf" "$_slurm_cluster_shell" "${slurm_cluster_pids[@]}"
  if [[ "$_slurm_cluster_saved_conf" == - ]]; then
    [[ "${SLURM_CONF:-}" == "$conf" ]] && unset SLURM_CONF
  else
    export SLURM_CONF=$_slurm_cluster_saved_conf
  fi
  slurm_cluster_conf=""
  slurm_cluster_pids=()
  _slurm_cluster_dir=""
  return 0
}
