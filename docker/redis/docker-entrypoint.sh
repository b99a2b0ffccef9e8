#!/bin/sh
# As the official image: options alone run redis-server with them; the server runs with protected
# mode off (the official image builds it so), since without a config file it would refuse other hosts.
set -e
case "${1:-}" in -*) set -- redis-server "$@" ;; esac
if [ "${1:-}" = redis-server ]; then
    shift
    exec redis-server "$@" --protected-mode no
fi
exec "$@"
