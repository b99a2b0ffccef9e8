#!/bin/bash
# First start on an empty PGDATA: initdb with POSTGRES_USER/POSTGRES_PASSWORD, create POSTGRES_DB,
# then run the server listening on every interface (password auth over TCP), as the official image does.
set -euo pipefail
if [ "${1:-postgres}" != postgres ]; then exec "$@"; fi
shift || true

: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "error: POSTGRES_PASSWORD is not set (the official image refuses to start without it too)" >&2
        exit 1
    fi
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust \
        --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    # The setup server listens on no TCP port and on a private socket: pg_isready (the compose health
    # check, on the default socket) stays false until the real server below is up.
    setup_socket=$(mktemp -d)
    pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -c unix_socket_directories=$setup_socket" start >/dev/null
    if [ "$POSTGRES_DB" != postgres ]; then
        createdb -h "$setup_socket" -U "$POSTGRES_USER" "$POSTGRES_DB"
    fi
    pg_ctl -D "$PGDATA" -w -m fast stop >/dev/null
    rmdir "$setup_socket"
    echo "initialised $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
