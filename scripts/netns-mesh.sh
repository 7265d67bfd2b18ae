#!/usr/bin/env bash
# A mesh over a real network on one machine: network namespaces joined by veth pairs through a bridge.
#
#   scripts/netns-mesh.sh                       # the failover scenario (scripts/netns/scenario.ts), as root
#   scripts/netns-mesh.sh --check               # exit 0 if namespaces can be made here, else 77 and why
#   scripts/netns-mesh.sh --hosts nas,r1,r2,r3 --driver bench/failover.ts   # another driver (the failover benchmark)
#
# Topology (one run; every name carries the run's id, so parallel runs and leftovers never clash):
#
#        <id>-nas          <id>-laptop        <id>-west          <id>-cloud
#     eth0 10.77.0.1    eth0 10.77.0.2     eth0 10.77.0.3     eth0 10.77.0.4
#          │                 │                  │                  │
#       p-nas ─────────── p-laptop ────────── p-west ─────────── p-cloud    bridge br0 in <id>-sw
#
# Nothing is added to the machine's own namespace: each veth pair is created straight into its two namespaces,
# and the bridge lives in a namespace of its own, so all traffic stays inside. The first host runs the
# orchestrator; the driver (a TypeScript program, run with `node --import tsx` inside the first host's namespace)
# starts everything else with `ip netns exec`, cuts and restores links by taking a host's bridge port down and up,
# and reports. On exit — success, failure or a signal — every process in the namespaces is killed and the
# namespaces are removed. Exit codes: 0 every step held, 1 one did not, 77 namespaces are not permitted here.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HOSTS="nas,laptop,west,cloud"
DRIVER="scripts/netns/scenario.ts"
CHECK_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) HOSTS="$2"; shift 2 ;;
    --driver) DRIVER="$2"; shift 2 ;;
    --check) CHECK_ONLY=1; shift ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "netns-mesh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
IFS=',' read -r -a NAMES <<< "$HOSTS"
if [ "${#NAMES[@]}" -lt 2 ] || [ "${#NAMES[@]}" -gt 200 ]; then
  echo "netns-mesh: --hosts takes 2 to 200 names (the first runs the orchestrator)" >&2; exit 2
fi
for name in "${NAMES[@]}"; do
  # The bridge port is p-<name>: an interface name has at most 15 characters.
  [[ "$name" =~ ^[a-z][a-z0-9]{0,12}$ ]] || { echo "netns-mesh: host name \"$name\": lowercase letters and digits, at most 13" >&2; exit 2; }
done

skip() {
  echo "netns-mesh: SKIP: $1" >&2
  exit 77
}

# Can this machine make namespaces for us? Each check names what is missing, so a skip is never silent.
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root (running as uid $(id -u)); run as root, e.g. sudo $0"
command -v ip >/dev/null 2>&1 || skip "the ip command (iproute2) is not installed: apt-get install -y iproute2"
RUN="gmnet-$$-$(printf '%04x' $((RANDOM % 65536)))"
PROBE="$RUN-probe"
if ! err=$(ip netns add "$PROBE" 2>&1); then skip "ip netns add failed: $err (a container without CAP_SYS_ADMIN, or /run/netns not writable)"; fi
if ! err=$(ip link add a0 netns "$PROBE" type veth peer name b0 netns "$PROBE" 2>&1); then
  ip netns del "$PROBE" 2>/dev/null || true
  skip "cannot create a veth pair inside a namespace: $err"
fi
if ! err=$(ip netns exec "$PROBE" ip link add br0 type bridge 2>&1); then
  ip netns del "$PROBE" 2>/dev/null || true
  skip "cannot create a bridge inside a namespace: $err"
fi
ip netns del "$PROBE"
if [ "$CHECK_ONLY" -eq 1 ]; then echo "netns-mesh: network namespaces, veth pairs and bridges work here"; exit 0; fi

# Leftovers of runs that were killed before their trap ran (gmnet-<pid>-…, whose pid is gone): removed.
for leftover in $(ip netns list | awk '{print $1}' | grep -E '^gmnet-[0-9]+-' || true); do
  pid="${leftover#gmnet-}"; pid="${pid%%-*}"
  if ! kill -0 "$pid" 2>/dev/null; then
    for p in $(ip netns pids "$leftover" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    ip netns del "$leftover" 2>/dev/null && echo "netns-mesh: removed $leftover, left by an earlier run"
  fi
done

SW="$RUN-sw"
NAMESPACES=()
cleanup() {
  local code=$?
  trap - EXIT INT TERM
  # Every process started in the run's namespaces (orchestrator, agents, engines, the driver), then the namespaces.
  for ns in "${NAMESPACES[@]}"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
  done
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  if [ -n "${WORK:-}" ]; then
    # A failed run (or GPUMESH_NETNS_KEEP=1) keeps the orchestrator's data and every process's log.
    if [ "$code" -eq 0 ] && [ -z "${GPUMESH_NETNS_KEEP:-}" ]; then rm -rf "$WORK"; else echo "netns-mesh: logs and data kept in $WORK" >&2; fi
  fi
  echo "netns-mesh: removed namespaces $RUN-*"
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ip netns add "$SW"; NAMESPACES+=("$SW")
ip netns exec "$SW" ip link set lo up
ip netns exec "$SW" ip link add br0 type bridge
ip netns exec "$SW" ip link set br0 up
ADDRESSES=()
index=0
for name in "${NAMES[@]}"; do
  ns="$RUN-$name"
  address="10.77.$((index / 250)).$((index % 250 + 1))"
  index=$((index + 1))
  ip netns add "$ns"; NAMESPACES+=("$ns")
  ip link add eth0 netns "$ns" type veth peer name "p-$name" netns "$SW"
  ip netns exec "$SW" ip link set "p-$name" master br0 up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip addr add "$address/16" dev eth0
  ip netns exec "$ns" ip link set eth0 up
  ADDRESSES+=("$name=$address")
done
echo "netns-mesh: namespaces $RUN-{sw,${HOSTS}}; ${ADDRESSES[*]}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/$RUN.XXXX")"
FIRST="$RUN-${NAMES[0]}"
cd "$ROOT"
# The driver runs in the first host's namespace: it reaches the orchestrator there, and other hosts only over the bridge.
# In the background, waited for: bash runs a trap (Ctrl-C, SIGTERM) only between commands, and `wait` is one.
ip netns exec "$FIRST" env \
  GPUMESH_NETNS_RUN="$RUN" GPUMESH_NETNS_SWITCH="$SW" GPUMESH_NETNS_HOSTS="${ADDRESSES[*]}" GPUMESH_NETNS_WORK="$WORK" \
  node --import tsx "$ROOT/$DRIVER" &
wait $!
