#!/usr/bin/env bash
# The docker engine for the docker sandbox (called by scripts/setup.sh; RPG_NO_DOCKER=1 skips it).
# Where apt-get exists: installs Debian's docker.io (the engine) and debootstrap (which builds the
# sandbox image: rpg-sandbox-image build). When no engine answers and this runs as root: starts
# dockerd with no bridge, no iptables rules and no IP forwarding (the sandbox's containers have no
# network), logging to /var/log/rpg-dockerd.log. It stops with status 1 when dockerd was started
# but does not answer within 60 s.
set -euo pipefail
if [ "${RPG_NO_DOCKER:-0}" = 1 ]; then
  echo "setup_docker: skipped (RPG_NO_DOCKER=1)"
  exit 0
fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
if command -v apt-get >/dev/null 2>&1; then
  missing=""
  command -v dockerd >/dev/null 2>&1 || missing="$missing docker.io"
  command -v debootstrap >/dev/null 2>&1 || missing="$missing debootstrap"
  if [ -n "$missing" ]; then
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086  # one word per package
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
  fi
fi
if ! command -v docker >/dev/null 2>&1; then
  echo "setup_docker: no docker client here (no apt-get?): the docker sandbox is not set up"
  exit 0
fi
if docker info >/dev/null 2>&1; then
  echo "setup_docker: a docker engine answers"
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v dockerd >/dev/null 2>&1; then
  echo "setup_docker: no docker engine answers; start one as root with:"
  echo "  dockerd --bridge=none --iptables=false --ip-forward=false &"
  exit 0
fi
log=/var/log/rpg-dockerd.log
setsid dockerd --bridge=none --iptables=false --ip-forward=false >"$log" 2>&1 < /dev/null &
pid=$!
for _ in $(seq 120); do
  if docker info >/dev/null 2>&1; then
    echo "setup_docker: started dockerd (pid $pid, log $log)"
    exit 0
  fi
  sleep 0.5
done
echo "setup_docker: dockerd (pid $pid) did not answer within 60 s; see $log" >&2
tail -n 5 "$log" >&2 || true
exit 1
