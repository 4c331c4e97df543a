# A private Slurm cluster of NODES simulated hosts on this machine, sourced.
# Each node is a network namespace on a bridge over a random 10.x.y.0/24
# (only these addresses are ever used; the layout of netns_hosts.sh, for any
# count) whose slurmd runs in a UTS namespace of its own under the node's
# host name (simnode0, simnode1, ...), so that a job's tasks on two nodes see
# two hosts (Open MPI's shared-memory transport crashes when two "hosts"
# share a name). munged (its socket is a path, reached from every namespace)
# and slurmctld run here, slurmctld on the bridge's address; each slurmd
# claims CPUS CPUs whatever the machine has (config_overrides). One
# slurm.conf for all: `slurmd -N` names the node; its spool, pid and log
# files and its TmpFS carry its name (%n: Slurm's PMIx plugin makes its
# clients' directory in TmpFS under a name the same on every node); every
# slurmd takes the same port on its own address. Every file it makes is in
# WORKDIR; it touches no other file and, when stopping, only its daemons, its
# jobs, its namespaces and its links. Runs as root (SlurmUser=root). munged,
# the settings and the stop it shares with slurm_cluster.sh are
# slurm_daemons.sh's.
#   slurm_netns_cluster_start WORKDIR [NODES [CPUS]]  starts it (NODES: 2,
#       CPUS: 4 per node), waits until every node is idle and exports
#       SLURM_CONF, and OMPI_MCA_{oob,btl}_tcp_if_include (the bridge's
#       subnet) for the jobs' tasks to inherit; on failure says why, shows the
#       tails of the daemons' logs and returns 1 (call slurm_netns_cluster_stop
#       then too). Progress goes to stdout.
#   slurm_netns_cluster_stop  cancels its jobs, shuts it down, ends its
#       daemons (TERM, then KILL) and whatever runs in its namespaces,
#       removes the namespaces, links and bridge, and puts the variables it
#       exported back as they were; WORKDIR stays.
# Sets slurm_netns_cluster_conf (the slurm.conf), slurm_netns_cluster_nodes
# (the node names, which are their host names), slurm_netns_cluster_addrs
# (their addresses), slurm_netns_cluster_subnet (10.x.y.0/24) and
# slurm_netns_cluster_pids (the daemons' pids). Works with or without
# set -euo pipefail in the caller.
slurm_netns_cluster_conf=""
slurm_netns_cluster_nodes=()
slurm_netns_cluster_addrs=()
slurm_netns_cluster_subnet=""
slurm_netns_cluster_pids=()
_slurm_netns_cluster_dir=""
_slurm_netns_cluster_tag=""  # prefix of its namespaces and links
_slurm_netns_cluster_made=() # "netns NAME" or "link NAME", in the order made
_slurm_netns_cluster_saved=() # "NAME=VALUE" or "NAME" (unset) of what it exported
_slurm_netns_cluster_shell=""
_slurm_netns_cluster_exports=(SLURM_CONF OMPI_MCA_oob_tcp_if_include OMPI_MCA_btl_tcp_if_include)
# shellcheck source=SCRIPTDIR/slurm_daemons.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm_daemons.sh"

# The bridge, and one namespace per node on it; fills the node arrays.
_slurm_netns_cluster_network() {
  local nodes=$1 tag=$_slurm_netns_cluster_tag prefix i ns
  for _ in $(seq 20); do  # a subnet no interface or route of this machine uses
    prefix="10.$((100 + RANDOM % 100)).$((RANDOM % 250))"
    ip -o addr show | grep -q " $prefix\." || ip route show | grep -q "^$prefix\." || break
    prefix=""
  done
  [[ -n "$prefix" ]] || { echo "no free 10.x.y.0/24 subnet"; return 1; }
  slurm_netns_cluster_subnet=$prefix.0/24
  ip link add "$tag-br" type bridge || return 1
  _slurm_netns_cluster_made+=("link $tag-br")
  ip addr add "$prefix.1/24" dev "$tag-br" && ip link set "$tag-br" up || return 1
  for ((i = 0; i < nodes; i++)); do
    ns=$tag-$i
    ip netns add "$ns" || return 1
    _slurm_netns_cluster_made+=("netns $ns")
    ip link add "$tag-v$i" type veth peer name "$tag-p$i" || return 1
    _slurm_netns_cluster_made+=("link $tag-v$i")  # the pair goes with it
    ip link set "$tag-p$i" netns "$ns" &&
      ip link set "$tag-v$i" master "$tag-br" up &&
      ip -n "$ns" addr add "$prefix.$((10 + i))/24" dev "$tag-p$i" &&
      ip -n "$ns" link set "$tag-p$i" up &&
      ip -n "$ns" link set lo up || return 1
    slurm_netns_cluster_nodes+=("simnode$i")
    slurm_netns_cluster_addrs+=("$prefix.$((10 + i))")
  done
}

slurm_netns_cluster_start() {
  local - # errexit and the rest as the caller had them, on return
  set +e
  local dir=${1:?usage: slurm_netns_cluster_start WORKDIR [NODES [CPUS]]} nodes=${2:-2} cpus=${3:-4}
  local port i node idle name
  if [[ -n "$_slurm_netns_cluster_dir" ]]; then
    echo "FAIL: a cluster is running already in $_slurm_netns_cluster_dir (slurm_netns_cluster_stop first)"
    return 1
  fi
  [[ "$nodes" =~ ^[1-9][0-9]?$ ]] || { echo "FAIL: slurm_netns_cluster_start: NODES '$nodes' is not a count below 100"; return 1; }
  [[ "$cpus" =~ ^[1-9][0-9]*$ ]] || { echo "FAIL: slurm_netns_cluster_start: CPUS '$cpus' is not a count"; return 1; }
  [[ -d "$dir" ]] || { echo "FAIL: slurm_netns_cluster_start: no directory $dir"; return 1; }
  _slurm_netns_cluster_dir=$(CDPATH="" cd -- "$dir" && pwd)
  dir=$_slurm_netns_cluster_dir
  _slurm_netns_cluster_shell=$BASHPID  # the daemons' parent
  _slurm_netns_cluster_saved=()
  for name in "${_slurm_netns_cluster_exports[@]}"; do
    if [[ -v $name ]]; then _slurm_netns_cluster_saved+=("$name=${!name}"); else _slurm_netns_cluster_saved+=("$name"); fi
  done
  # Interface names have at most 15 characters: sn + pid + -v + 2 digits.
  _slurm_netns_cluster_tag=sn$$
  for _ in $(seq 20); do  # names nobody uses (a run killed before its stop leaves them)
    ip link show "$_slurm_netns_cluster_tag-br" >/dev/null 2>&1 ||
      [[ -e "/run/netns/$_slurm_netns_cluster_tag-0" ]] || break
    _slurm_netns_cluster_tag=sn$((RANDOM * 32 + RANDOM % 32))
  done

  echo "== bridge $_slurm_netns_cluster_tag-br and $nodes namespaces"
  _slurm_netns_cluster_network "$nodes" ||
    { _slurm_daemons_fail "$dir" "could not make the bridge and the namespaces"; return 1; }
  export OMPI_MCA_oob_tcp_if_include=$slurm_netns_cluster_subnet
  export OMPI_MCA_btl_tcp_if_include=$slurm_netns_cluster_subnet

  _slurm_daemons_munged "$dir" slurm_netns_cluster_pids || return 1

  echo "== slurmctld on ${slurm_netns_cluster_subnet%.0/24}.1, a slurmd in each namespace"
  # slurmctld listens on every address here, each slurmd on its namespace's:
  # the pair of ports must be free here alone.
  port=$(_slurm_daemons_port)
  mkdir -p "$dir/state"
  {
    _slurm_daemons_conf "$dir" crownnetns "$(hostname)(${slurm_netns_cluster_subnet%.0/24}.1)" "$port"
    cat <<CONF
SlurmdSpoolDir=$dir/spool-%n
TmpFS=$dir/tmp-%n
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmdLogFile=$dir/slurmd-%n.log
CONF
    for i in "${!slurm_netns_cluster_nodes[@]}"; do
      node=${slurm_netns_cluster_nodes[$i]}
      echo "NodeName=$node NodeHostname=$node NodeAddr=${slurm_netns_cluster_addrs[$i]} CPUs=$cpus State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=$(IFS=,; echo "${slurm_netns_cluster_nodes[*]}") Default=YES MaxTime=INFINITE State=UP"
  } >"$dir/slurm.conf"
  slurm_netns_cluster_conf=$dir/slurm.conf
  export SLURM_CONF=$slurm_netns_cluster_conf
  slurmctld -D -i -f "$SLURM_CONF" >"$dir/slurmctld.out.log" 2>&1 &
  slurm_netns_cluster_pids+=($!)
  for i in "${!slurm_netns_cluster_nodes[@]}"; do
    node=${slurm_netns_cluster_nodes[$i]}
    mkdir -p "$dir/spool-$node" "$dir/tmp-$node"
    # nsenter, not ip netns exec, which mounts a /sys without the cgroups
    # slurmd needs; nsenter and unshare exec what they run: $! is slurmd.
    # shellcheck disable=SC2016  # $1 and $2 are sh's
    nsenter --net="/run/netns/$_slurm_netns_cluster_tag-$i" unshare --uts /bin/sh -c \
      'hostname "$1" && exec slurmd -D -N "$1" -f "$2"' sh "$node" "$SLURM_CONF" \
      >"$dir/slurmd-$node.out.log" 2>&1 &
    slurm_netns_cluster_pids+=($!)
  done
  for _ in $(seq 150); do
    idle=$(sinfo -h -N -o "%N %t" 2>/dev/null | grep -c " idle$")
    ((idle == nodes)) && break
    sleep 0.2
  done
  ((idle == nodes)) || {
    sinfo -N -o "%N %t" 2>&1
    _slurm_daemons_fail "$dir" "$idle of the $nodes nodes came up"
    return 1
  }
  sinfo -N -o "%N %c %t"
}

slurm_netns_cluster_stop() {
  local - conf=$slurm_netns_cluster_conf entry pid i
  set +e
  [[ -n "$_slurm_netns_cluster_dir" ]] || return 0
  _slurm_daemons_stop "$conf" "$_slurm_netns_cluster_shell" "${slurm_netns_cluster_pids[@]}"
  # Whatever still runs in its namespaces (a slurmstepd, a task) is its own.
  for entry in "${_slurm_netns_cluster_made[@]}"; do
    [[ "$entry" == netns\ * ]] || continue
    for pid in $(ip netns pids "${entry#netns }" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
  done
  for ((i = ${#_slurm_netns_cluster_made[@]} - 1; i >= 0; i--)); do
    entry=${_slurm_netns_cluster_made[$i]}
    case "$entry" in
      netns\ *) ip netns del "${entry#netns }" 2>/dev/null ;;
      link\ *) ip link del "${entry#link }" 2>/dev/null ;;
    esac
  done
  for entry in "${_slurm_netns_cluster_saved[@]}"; do
    if [[ "$entry" == *=* ]]; then export "${entry%%=*}=${entry#*=}"; else unset "$entry"; fi
  done
  slurm_netns_cluster_conf=""
  slurm_netns_cluster_nodes=()
  slurm_netns_cluster_addrs=()
  slurm_netns_cluster_subnet=""
  slurm_netns_cluster_pids=()
  _slurm_netns_cluster_made=()
  _slurm_netns_cluster_saved=()
  _slurm_netns_cluster_dir=""
  return 0
}
