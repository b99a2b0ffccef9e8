#!/usr/bin/env bash
# The serial phase of `make test` (tests/conftest.py): its two streams at once, each one test at a time. The
# cluster stream (tests/slurm, tests/web, tests/train, the runner's container) mostly waits on SLURM and Docker,
# the stack stream (the service stacks, the real runs) keeps both cores busy. The cluster stream's output is
# kept in a file and printed when both have ended. Arguments go to both pytest commands.
#
#   scripts/test-streams.sh [pytest args]      SERIAL_STREAMS=1: one stream, everything one at a time
set -uo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
passed() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }  # 5: nothing selected

if [ "${SERIAL_STREAMS:-2}" = 1 ]; then
    AIPERF_TEST_PHASE=serial "$py" -m pytest "$@"
    rc=$?
    passed "$rc"
    exit
fi

log=$(mktemp /tmp/aiperf-cluster-stream.XXXXXX)
AIPERF_TEST_PHASE=serial AIPERF_TEST_STREAM=cluster "$py" -m pytest "$@" >"$log" 2>&1 &
cluster=$!
trap 'kill "$cluster" 2>/dev/null; exit 130' INT TERM
started=$SECONDS
AIPERF_TEST_PHASE=serial AIPERF_TEST_STREAM=stack "$py" -m pytest "$@"
stack_rc=$?
echo "== the stack stream ended after $((SECONDS - started)) s (exit status $stack_rc)"
wait "$cluster"
cluster_rc=$?
echo "== the cluster stream (tests/slurm, tests/web, tests/train, the runner's container), ended after" \
     "$((SECONDS - started)) s (exit status $cluster_rc):"
cat "$log"
rm -f "$log"
passed "$stack_rc" && passed "$cluster_rc"
