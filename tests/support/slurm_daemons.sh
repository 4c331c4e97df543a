# The daemons of a private Slurm cluster, sourced by slurm_cluster.sh (one
# node, this host) and slurm_netns_cluster.sh (simulated hosts in network
# namespaces): munged's start, the slurm.conf settings both share, the
# failure report with the daemons' logs, and the stop that ends only the
# daemons they started. It keeps no state: each cluster passes in its WORKDIR,
# its slurm.conf, SHELL (the pid of the shell that started its daemons, their
# parent) and its daemons' pids, munged first, slurmctld second, then the
# slurmds. Called with set +e.

_slurm_daemons_fail() {  # DIR MESSAGE...: says why, shows the tails of the daemons' logs in DIR; returns 1
  local dir=$1 log
  shift
  echo "FAIL: $*"
  for log in "$dir"/{munged,munged.out,slurmctld,slurmctld.out}.log "$dir"/slurmd*.log; do
    [[ -e "$log" ]] || continue
    echo "--- $log"
    tail -15 "$log"
  done
  return 1
}

# DIR PIDS: munged with a new key, its socket, pid, seed and logs in DIR; adds
# its pid to the array named PIDS and waits for the socket.
_slurm_daemons_munged() {
  local dir=$1
  local -n _slurm_daemons_pids=$2
  echo "== munged"
  (umask 077 && dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none) &&
    chmod 400 "$dir/munge.key" || { _slurm_daemons_fail "$dir" "no munge key in $dir"; return 1; }
  munged --force --foreground --socket="$dir/munge.sock" --key-file="$dir/munge.key" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge.seed" \
    >"$dir/munged.out.log" 2>&1 &
  _slurm_daemons_pids+=($!)
  for _ in $(seq 50); do [[ -S "$dir/munge.sock" ]] && break; sleep 0.1; done
  [[ -S "$dir/munge.sock" ]] || { _slurm_daemons_fail "$dir" "munged did not start"; return 1; }
}

_slurm_daemons_port() {  # a random port that nobody here listens on, nor on the next (slurmctld's and slurmd's)
  local port=$((20000 + RANDOM % 20000))
  while ss -ltn | grep -Eq ":($port|$((port + 1))) "; do port=$((20000 + RANDOM % 20000)); done
  echo "$port"
}

# DIR NAME HOST PORT: the start of slurm.conf, what both clusters share: the
# cluster NAME, its controller on HOST (Slurm's "name(address)" too) at PORT,
# each slurmd at PORT + 1, munge's socket, the controller's files in DIR, and
# every node claiming the CPUs its line says (config_overrides). The slurmds'
# files, the nodes and the partition follow.
_slurm_daemons_conf() {
  cat <<CONF
ClusterName=$2
SlurmctldHost=$3
SlurmctldPort=$4
SlurmdPort=$(($4 + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$1/munge.sock
CredType=cred/munge
StateSaveLocation=$1/state
SlurmctldPidFile=$1/slurmctld.pid
SlurmctldLogFile=$1/slurmctld.log
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
CONF
}

# CONF SHELL PID...: cancels the cluster's jobs, shuts it down and ends its
# daemons PID... (TERM, then KILL), each only while SHELL's child. Through
# this cluster's controller (CONF), never another, and only while it answers:
# a signal to the caller's process group (timeout's) ends the daemons too, and
# a client retries an absent controller for 9 s; 3 s at most each.
_slurm_daemons_stop() {
  local conf=$1 shell=$2 jobs pid
  shift 2
  if [[ -n "$conf" ]] && _slurm_daemons_running "$shell" "${2:-}" &&
    jobs=$(_slurm_daemons_client "$conf" squeue -h -o %i); then
    if [[ -n "$jobs" ]]; then
      # shellcheck disable=SC2086  # job ids
      _slurm_daemons_client "$conf" scancel --full $jobs
      for _ in $(seq 100); do
        jobs=$(_slurm_daemons_client "$conf" squeue -h -o %i) && [[ -n "$jobs" ]] || break
        sleep 0.1
      done
    fi
    _slurm_daemons_client "$conf" scontrol shutdown >/dev/null
    _slurm_daemons_wait "$shell" 10 "${@:2}"  # slurmctld and the slurmds: 1 s to end
  fi
  _slurm_daemons_signal "$shell" TERM "$@"
  _slurm_daemons_wait "$shell" 5 "$@"
  _slurm_daemons_signal "$shell" KILL "$@"
  for pid in "$@"; do wait "$pid" 2>/dev/null; done
  return 0
}

_slurm_daemons_client() {  # CONF COMMAND...: a Slurm client of the cluster of CONF, 3 s at most
  local conf=$1
  shift
  SLURM_CONF=$conf timeout -k 1 3 "$@" 2>/dev/null
}

_slurm_daemons_ours() {  # SHELL PID: a daemon SHELL started, still its child (not a reused pid)
  [[ "$(ps -o ppid= -p "$2" 2>/dev/null | tr -d ' ')" == "$1" ]]
}

_slurm_daemons_running() {  # SHELL PID: a daemon SHELL started, not ended (a zombie is)
  [[ -n "$2" ]] && _slurm_daemons_ours "$1" "$2" && [[ "$(ps -o stat= -p "$2" 2>/dev/null)" != Z* ]]
}

_slurm_daemons_signal() {  # SHELL SIGNAL PID...: to each of them that SHELL started, still there
  local shell=$1 signal=$2 pid
  shift 2
  for pid in "$@"; do
    _slurm_daemons_ours "$shell" "$pid" && kill -"$signal" "$pid" 2>/dev/null
  done
  return 0
}

_slurm_daemons_wait() {  # SHELL TENTHS PID...: until none of them is left (zombies aside), at most TENTHS/10 s
  local shell=$1 tenths=$2 pid alive
  shift 2
  for _ in $(seq "$tenths"); do
    alive=""
    for pid in "$@"; do
      _slurm_daemons_running "$shell" "$pid" && alive=1
    done
    [[ -z "$alive" ]] && return 0
    sleep 0.1
  done
  return 0
}
