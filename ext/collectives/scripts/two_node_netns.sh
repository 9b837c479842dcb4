#!/usr/bin/env bash
# Two emulated nodes on one machine: network namespaces thpc_n0 / thpc_n1 joined by a veth pair whose
# both ends are rate-limited (tc tbf), so traffic between the "nodes" takes a slow link while traffic
# inside a node stays on the namespace's own loopback path.  Needs root; touches nothing but what it creates
# (private addresses 10.231.0.1-2 on the veth pair; no route to any other address).
#
#   two_node_netns.sh up [RATE_MBIT=200]        create the namespaces and the limited link
#   two_node_netns.sh run NPROC_PER_NODE [bench flags...]
#                                               torchhpc.trainers.collectives, one torchrun per namespace
#                                               (nodes found from torchrun's GROUP_RANK: --ranks-per-node 0)
#   two_node_netns.sh down                      delete both namespaces (and the veth pair with them)
set -euo pipefail
NS0=thpc_n0 NS1=thpc_n1 V0=thpc_v0 V1=thpc_v1 A0=10.231.0.1 A1=10.231.0.2
PY=${PYTHON:-$(command -v python)}
cmd=${1:-}
case "$cmd" in
  up)
    rate=${2:-200}
    ip netns add $NS0
    ip netns add $NS1
    ip link add $V0 type veth peer name $V1
    ip link set $V0 netns $NS0
    ip link set $V1 netns $NS1
    ip -n $NS0 addr add $A0/30 dev $V0
    ip -n $NS1 addr add $A1/30 dev $V1
    for ns in $NS0 $NS1; do ip -n $ns link set lo up; done
    ip -n $NS0 link set $V0 up
    ip -n $NS1 link set $V1 up
    tc -n $NS0 qdisc add dev $V0 root tbf rate "${rate}mbit" burst 256kb latency 100ms
    tc -n $NS1 qdisc add dev $V1 root tbf rate "${rate}mbit" burst 256kb latency 100ms
    echo "nodes up: $NS0 ($A0) <-> $NS1 ($A1), ${rate} Mbit/s each way"
    ;;
  run)
    nproc=${2:?NPROC_PER_NODE}
    shift 2
    port=${PORT:-29533}
    common=(-m torch.distributed.run --nnodes 2 --nproc-per-node "$nproc" --master-addr $A0 --master-port "$port"
            -m torchhpc.trainers.collectives --ranks-per-node 0 --inter-node-mbps 0 "$@")
    ip netns exec $NS1 env GLOO_SOCKET_IFNAME=$V1 OMP_NUM_THREADS=1 "$PY" "${common[@]:0:1}" "${common[@]:1:1}" \
      --node-rank 1 "${common[@]:2}" >/dev/null &
    other=$!
    ip netns exec $NS0 env GLOO_SOCKET_IFNAME=$V0 OMP_NUM_THREADS=1 "$PY" "${common[@]:0:1}" "${common[@]:1:1}" \
      --node-rank 0 "${common[@]:2}"
    status=$?
    wait $other
    exit $status
    ;;
  down)
    ip netns del $NS0 2>/dev/null || true
    ip netns del $NS1 2>/dev/null || true
    ;;
  *)
    sed -n '2,12p' "$0"
    exit 2
    ;;
esac
