#!/usr/bin/env bash
# More Docker engines for bench/docker_redeploy.py --hosts-file: N simulated hosts, each made
# as scripts/docker-testenv makes host B — a network namespace, a veth pair, its own
# containerd + dockerd, and an sshd (root, the testenv's client key) — reached as
# ssh://root@10.234.<i>.2. Every daemon runs in its namespace through `nsenter --net=...`.
# Hosts A and B and the registry are the testenv's and are never touched here.
#
#   bench/many_hosts.sh up N     start hosts 1..N (idempotent); writes hosts (URLs naming each
#                                engine's socket), hosts.dial-stdio (the same hosts by their bare
#                                URLs), ssh_config and known_hosts under $BENCH_HOSTS
#                                (default /var/lib/shipway/bench-hosts)
#   bench/many_hosts.sh down     stop every daemon this script started, remove its links and
#                                namespaces, and its state (images pulled into the engines too)
#
# Needs the testenv up (its registry, its client key, Debian's docker.io/containerd/sshd).
set -euo pipefail

BASE=${BENCH_HOSTS:-/var/lib/shipway/bench-hosts}
RUN=/run/shipway-bench-hosts
TESTENV=${SHIPWAY_TESTENV_STATE:-/var/lib/shipway/docker-testenv}
KEY=$TESTENV/ssh/id_ed25519
REGISTRY=10.231.0.1:15000

log() { printf '[many-hosts] %s\n' "$*" >&2; }

alive() { # pidfile
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

start() { # pidfile log cmd...
  local pidfile=$1 logfile=$2
  shift 2
  alive "$pidfile" && return 0
  setsid "$@" >>"$logfile" 2>&1 </dev/null &
  echo $! >"$pidfile"
}

stop() { # pidfile
  local pid i
  alive "$1" || { rm -f "$1"; return 0; }
  pid=$(cat "$1")
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 150; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$1"
}

up_host() { # i
  local i=$1 ns=swbench-h$1 veth=swbh$1 ip=10.234.$1.2 root=10.234.$1.1
  local dir=$BASE/h$i run=$RUN/h$i
  mkdir -p "$dir/docker" "$dir/containerd" "$dir/sshd" "$run/exec" "$run/containerd"
  chmod 700 "$run"
  [ -e "/run/netns/$ns" ] || ip netns add "$ns"
  ip -n "$ns" link set lo up
  if ! ip link show "$veth" >/dev/null 2>&1; then
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip addr add "$root/30" dev "$veth"
    ip -n "$ns" addr add "$ip/30" dev eth0
  fi
  ip link set "$veth" up
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route show default | grep -q . || ip -n "$ns" route add default via "$root"

  cat >"$dir/containerd.toml" <<EOF
version = 2
root = "$dir/containerd"
state = "$run/containerd"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$run/containerd.sock"
[ttrpc]
  address = ""
[debug]
  address = ""
[metrics]
  address = ""
EOF
  cat >"$dir/daemon.json" <<EOF
{
  "hosts": ["unix://$run/docker.sock"],
  "data-root": "$dir/docker",
  "exec-root": "$run/exec",
  "pidfile": "$run/dockerd.self.pid",
  "containerd": "$run/containerd.sock",
  "deprecated-key-path": "$dir/key.json",
  "insecure-registries": ["$REGISTRY"],
  "storage-driver": "overlay2",
  "log-driver": "json-file",
  "log-opts": {"max-size": "1m", "max-file": "1"},
  "features": {"buildkit": false}
}
EOF
  [ -s "$dir/sshd/host_key" ] || ssh-keygen -q -t ed25519 -N '' -C "bench-h$i" -f "$dir/sshd/host_key"
  install -m 600 "$KEY.pub" "$dir/sshd/authorized_keys"
  cat >"$dir/sshd/sshd_config" <<EOF
Port 22
ListenAddress $ip
AddressFamily inet
HostKey $dir/sshd/host_key
PidFile $run/sshd.pid
AuthorizedKeysFile $dir/sshd/authorized_keys
AllowUsers root
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowTcpForwarding yes
MaxSessions 64
MaxStartups 64:30:128
SetEnv DOCKER_HOST=unix://$run/docker.sock PATH=/usr/bin:/bin:/usr/sbin:/sbin
EOF
  start "$run/containerd.pid" "$dir/containerd.log" \
    nsenter "--net=/run/netns/$ns" /usr/bin/containerd --config "$dir/containerd.toml"
  for _ in $(seq 150); do [ -S "$run/containerd.sock" ] && break; sleep 0.2; done
  alive "$run/dockerd.pid" || rm -f "$run/dockerd.self.pid"
  start "$run/dockerd.pid" "$dir/dockerd.log" \
    nsenter "--net=/run/netns/$ns" /usr/sbin/dockerd --config-file "$dir/daemon.json"
  mkdir -p /run/sshd
  start "$run/sshd.pid.launcher" "$dir/sshd.log" \
    nsenter "--net=/run/netns/$ns" /usr/sbin/sshd -D -e -f "$dir/sshd/sshd_config"
  printf '%s %s\n' "$ip" "$(cut -d' ' -f1,2 "$dir/sshd/host_key.pub")" >>"$BASE/known_hosts.tmp"
  # the engine's socket named in the URL: sshd forwards each API connection to it
  echo "ssh://root@$ip$run/docker.sock" >>"$BASE/hosts.tmp"
  echo "ssh://root@$ip" >>"$BASE/hosts.dial-stdio.tmp"
}

up() {
  local n=$1 i
  mkdir -p "$BASE" "$RUN"
  : >"$BASE/known_hosts.tmp"
  : >"$BASE/hosts.tmp"
  : >"$BASE/hosts.dial-stdio.tmp"
  for ((i = 1; i <= n; i++)); do
    log "host $i: 10.234.$i.2"
    up_host "$i"
  done
  mv "$BASE/known_hosts.tmp" "$BASE/known_hosts"
  mv "$BASE/hosts.tmp" "$BASE/hosts"
  mv "$BASE/hosts.dial-stdio.tmp" "$BASE/hosts.dial-stdio"
  # B's entry too, so a bench over A, B and these hosts trusts all of them
  cat "$TESTENV/ssh/known_hosts" >>"$BASE/known_hosts"
  cat >"$BASE/ssh_config" <<EOF
Host 10.234.*.2 10.231.0.2
  User root
  IdentityFile $KEY
  IdentitiesOnly yes
EOF
  for ((i = 1; i <= n; i++)); do
    for _ in $(seq 300); do
      curl -fsS --max-time 2 --unix-socket "$RUN/h$i/docker.sock" http://docker/_ping \
        >/dev/null 2>&1 && break
      sleep 0.2
    done
  done
  log "$n hosts up: $BASE/hosts"
}

down() {
  local dir i ns id m
  for dir in "$RUN"/h*; do
    [ -d "$dir" ] || continue
    # every container the bench left, removed through the engine's API (no docker CLI)
    if [ -S "$dir/docker.sock" ]; then
      for id in $(curl -fsS --max-time 10 --unix-socket "$dir/docker.sock" \
        'http://docker/containers/json?all=1' 2>/dev/null | grep -o '"Id":"[0-9a-f]*"' | cut -d'"' -f4); do
        curl -fsS --max-time 30 -X DELETE --unix-socket "$dir/docker.sock" \
          "http://docker/containers/$id?force=1" >/dev/null 2>&1 || true
      done
    fi
    stop "$dir/sshd.pid.launcher"
    stop "$dir/dockerd.pid"
    stop "$dir/containerd.pid"
  done
  # what the engines left mounted under their state (overlay layers, netns files)
  for m in $(awk '{print $2}' /proc/mounts | grep -E "^($BASE|$RUN)/" | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  for ns in /run/netns/swbench-h*; do
    [ -e "$ns" ] || continue
    i=${ns##*swbench-h}
    ip link del "swbh$i" 2>/dev/null || true
    ip netns del "swbench-h$i"
  done
  # the engines' mounts (overlay, netns bind mounts under exec-root) go with their daemons
  rm -rf "$RUN" "$BASE"
  log "down"
}

case ${1:-} in
  up) up "${2:?how many hosts}" ;;
  down) down ;;
  *) echo "usage: $0 up N | down" >&2; exit 2 ;;
esac
