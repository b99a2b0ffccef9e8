#!/usr/bin/env bash
# Start (if down) the services the tests use: PostgreSQL, Redis, and a local SLURM cluster.
# `stop-ours` stops only what this script started (recorded in var/services/started).
set -euo pipefail
cd "$(dirname "$0")/.."
STATE=var/services
mkdir -p "$STATE"

start_postgres() {
    if pg_isready -q -h 127.0.0.1 -p 5432; then return; fi
    if ls /etc/postgresql/*/main >/dev/null 2>&1; then
        pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
    else
        local ver dir
        ver=$(ls /usr/lib/postgresql | sort -n | tail -n1)
        dir=/var/lib/postgresql/aiperf-ci
        mkdir -p "$dir" && chown postgres:postgres "$dir"
        [ -f "$dir/PG_VERSION" ] || su postgres -c "/usr/lib/postgresql/$ver/bin/initdb -D $dir -U postgres --auth=trust" >/dev/null
        su postgres -c "/usr/lib/postgresql/$ver/bin/pg_ctl -D $dir -l $dir.log -w start -o '-p 5432 -c listen_addresses=127.0.0.1'"
    fi
    for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
    echo postgres >> "$STATE/started"
    psql -h 127.0.0.1 -U postgres -tc "SELECT 1 FROM pg_database WHERE datname='test'" | grep -q 1 \
        || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE test" >/dev/null
}

start_redis() {
    if redis-cli -h 127.0.0.1 ping >/dev/null 2>&1; then return; fi
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log
    for _ in $(seq 1 30); do redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && break; sleep 0.5; done
    echo redis >> "$STATE/started"
}

start_slurm() {
    if [ -x scripts/slurm-cluster.sh ] && command -v slurmctld >/dev/null; then
        bash scripts/slurm-cluster.sh start
    fi
}

case "${1:-start}" in
    start)
        start_postgres
        start_redis
        start_slurm
        ;;
    stop-ours)
        [ -x scripts/slurm-cluster.sh ] && bash scripts/slurm-cluster.sh stop || true
        rm -f "$STATE/started"
        ;;
    *) echo "usage: $0 start|stop-ours" >&2; exit 2 ;;
esac
