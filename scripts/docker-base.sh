#!/usr/bin/env bash
# Docker on a machine without registry access: start dockerd if it is down and build the local
# Debian base image (debootstrap) that the project's images are built FROM.
#
#   scripts/docker-base.sh start     start dockerd (if down) and build aiperf-base:bookworm (if missing)
#   scripts/docker-base.sh stop      stop the dockerd this script started (nothing else)
#
# Environment: BASE_IMAGE (default aiperf-base:bookworm), DEBIAN_MIRROR (default: the first URI of
# /etc/apt/sources.list.d/debian.sources, else deb.debian.org).
set -euo pipefail
cd "$(dirname "$0")/.."
state=var/docker
mkdir -p "$state"
base=${BASE_IMAGE:-aiperf-base:bookworm}

mirror() {
    if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
    local uri
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    echo "${uri:-http://deb.debian.org/debian}"
}

start_dockerd() {
    if docker info >/dev/null 2>&1; then return; fi
    # No systemd here: dockerd runs in the background and its pid is kept so that stop kills only it.
    nohup dockerd >"$state/dockerd.log" 2>&1 &
    echo $! >"$state/dockerd.pid"
    for _ in $(seq 60); do
        docker info >/dev/null 2>&1 && return
        sleep 1
    done
    echo "dockerd did not start; see $state/dockerd.log" >&2
    tail -20 "$state/dockerd.log" >&2
    exit 1
}

build_base() {
    if docker image inspect "$base" >/dev/null 2>&1; then return; fi
    local rootfs
    rootfs=$(mktemp -d /tmp/aiperf-rootfs.XXXXXX)
    # minbase plus what the images need to make a venv and reach the package registries over TLS.
    debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
        bookworm "$rootfs" "$(mirror)" >"$state/debootstrap.log" 2>&1 \
        || { tail -20 "$state/debootstrap.log" >&2; rm -rf "$rootfs"; exit 1; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -c . | docker import - "$base" >/dev/null
    rm -rf "$rootfs"
}

case "${1:-start}" in
    start)
        start_dockerd
        build_base
        echo "docker: dockerd up, base image $base"
        ;;
    stop)
        if [ -f "$state/dockerd.pid" ]; then
            kill "$(cat "$state/dockerd.pid")" 2>/dev/null || true
            rm -f "$state/dockerd.pid"
        fi
        ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
