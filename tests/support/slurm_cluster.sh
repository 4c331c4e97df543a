# A private Slurm cluster on this machine, sourced: munged, slurmctld and
# slurmd from Debian's packages with a temporary key and socket, a random pair
# of ports nobody listens on, and one node (this host) that claims CPUS CPUs
# whatever it has (SlurmdParameters=config_overrides). Every file it makes is
# in WORKDIR; it touches no other file and, when stopping, only the daemons it
# started and the jobs of its own cluster. Runs as root (SlurmUser=root).
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

_slurm_cluster_fail() {
  local log
  echo "FAIL: $*"
  for log in munged.log munged.out.log slurmctld.log slurmctld.out.log slurmd.log slurmd.out.log; do
    [[ -e "$_slurm_cluster_dir/$log" ]] || continue
    echo "--- $_slurm_cluster_dir/$log"
    tail -15 "$_slurm_cluster_dir/$log"
  done
  return 1
}

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

  echo "== munged"
  (umask 077 && dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none) &&
    chmod 400 "$dir/munge.key" || { _slurm_cluster_fail "no munge key in $dir"; return 1; }
  munged --force --foreground --socket="$dir/munge.sock" --key-file="$dir/munge.key" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge.seed" \
    >"$dir/munged.out.log" 2>&1 &
  slurm_cluster_pids+=($!)
  for _ in $(seq 50); do [[ -S "$dir/munge.sock" ]] && break; sleep 0.1; done
  [[ -S "$dir/munge.sock" ]] || { _slurm_cluster_fail "munged did not start"; return 1; }

  echo "== slurmctld and slurmd"
  node=$(hostname)
  port=$((20000 + RANDOM % 20000))
  while ss -ltn | grep -Eq ":($port|$((port + 1))) "; do port=$((20000 + RANDOM % 20000)); done
  mkdir -p "$dir/state" "$dir/spool"
  cat >"$dir/slurm.conf" <<CONF
ClusterName=crowntest
SlurmctldHost=$node
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
MinJobAge=600
SlurmdParameters=config_overrides
NodeName=$node CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
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
  [[ "$state" == idle ]] || { _slurm_cluster_fail "the node did not come up (state '${state:-none}')"; return 1; }
  sinfo -N -o "%N %c %t"
}

slurm_cluster_stop() {
  local - conf=$slurm_cluster_conf
  set +e
  [[ -n "$_slurm_cluster_dir" ]] || return 0
  if [[ -n "$conf" ]]; then  # this cluster's controller, never another
    if [[ -n "$(SLURM_CONF=$conf squeue -h -o %i 2>/dev/null)" ]]; then
      SLURM_CONF=$conf scancel --full $(SLURM_CONF=$conf squeue -h -o %i) 2>/dev/null
      for _ in $(seq 100); do
        [[ -z "$(SLURM_CONF=$conf squeue -h -o %i 2>/dev/null)" ]] && break
        sleep 0.1
      done
    fi
    SLURM_CONF=$conf scontrol shutdown >/dev/null 2>&1
    _slurm_cluster_wait 10 "${slurm_cluster_pids[@]:1}"  # slurmctld and slurmd: 1 s to end
  fi
  _slurm_cluster_signal TERM
  _slurm_cluster_wait 5 "${slurm_cluster_pids[@]}"
  _slurm_cluster_signal KILL
  for pid in "${slurm_cluster_pids[@]}"; do wait "$pid" 2>/dev/null; done
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

_slurm_cluster_ours() {  # a daemon it started, still a child of the shell that did (not a reused pid)
  [[ "$(ps -o ppid= -p "$1" 2>/dev/null | tr -d ' ')" == "$_slurm_cluster_shell" ]]
}

_slurm_cluster_signal() {  # SIGNAL: to each of its daemons still there
  local pid
  for pid in "${slurm_cluster_pids[@]}"; do
    _slurm_cluster_ours "$pid" && kill -"$1" "$pid" 2>/dev/null
  done
  return 0
}

_slurm_cluster_wait() {  # TENTHS PID...: until none of them is left (zombies aside), at most TENTHS/10 s
  local tenths=$1 pid alive
  shift
  for _ in $(seq "$tenths"); do
    alive=""
    for pid in "$@"; do
      _slurm_cluster_ours "$pid" && [[ "$(ps -o stat= -p "$pid")" != Z* ]] && alive=1
    done
    [[ -z "$alive" ]] && return 0
    sleep 0.1
  done
  return 0
}
