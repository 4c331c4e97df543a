# Simulated hosts for the system tests, sourced: three network namespaces on
# a bridge over a random 10.x.y.0/24 (only these addresses are ever used),
# a hostfile, and an rsh agent that runs a command in a host's namespace
# under its own host name (Open MPI's shared-memory transport crashes when
# two "hosts" share one).
#   netns_hosts_up TAG SLOTS WORK  makes them; sets subnet, hostfile, agent
#   netns_hosts_down TAG           kills what runs in them and removes them
netns_hosts_up() {
  local tag=$1 slots=$2 work=$3 prefix i ns
  subnet="10.$((100 + RANDOM % 100)).$((RANDOM % 250)).0"
  prefix=${subnet%.0}
  hostfile=$work/hosts
  agent=$work/agent
  ip link add "$tag-br" type bridge
  ip addr add "$prefix.1/24" dev "$tag-br"
  ip link set "$tag-br" up
  for i in 0 1 2; do
    ns=$tag-$i
    ip netns add "$ns"
    ip link add "$tag-v$i" type veth peer name "$tag-p$i"
    ip link set "$tag-p$i" netns "$ns"
    ip link set "$tag-v$i" master "$tag-br" up
    ip -n "$ns" addr add "$prefix.$((10 + i))/24" dev "$tag-p$i"
    ip -n "$ns" link set "$tag-p$i" up
    ip -n "$ns" link set lo up
    echo "$prefix.$((10 + i)) slots=$slots" >>"$hostfile"
  done
  # `agent HOST COMMAND...` runs COMMAND in HOST's namespace, as simhostN.
  cat >"$agent" <<AGENT
#!/bin/bash
host=\$1; shift
[[ "\$1" == -* ]] && shift  # options ssh would take
i=\$(( \${host##*.} - 10 ))
exec ip netns exec $tag-\$i unshare --uts /bin/bash -c "hostname simhost\$i; exec \$*"
AGENT
  chmod +x "$agent"
}

netns_hosts_down() {
  local tag=$1 i pid
  for i in 0 1 2; do
    for pid in $(ip netns pids "$tag-$i" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    ip netns del "$tag-$i" 2>/dev/null
    ip link del "$tag-v$i" 2>/dev/null  # the pair goes with it
  done
  ip link del "$tag-br" 2>/dev/null
}
