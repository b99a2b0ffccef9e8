#!/usr/bin/env bash
# The serial phase of `make test` (tests/conftest.py): its two streams at once (SERIAL_STREAMS=2, the default), each
# one test at a time: the cluster stream (tests/slurm, tests/web, tests/train, the runner's container, the compose
# deployment) mostly waits on SLURM and Docker (half a core busy on average, measured), the stack stream (the service
# stacks, the real runs) keeps both cores busy. SERIAL_STREAMS=1 runs every test one at a time. Measured in whole CI
# runs on 2 cores: the two streams ended after 1,692-2,079 s together, where one stream takes 2,830 s. Tests that
# starved under that load end on what they need, not on the clock (the llm_run fixture on a finished child, the SLURM
# AIPerf-LLM run on a finished trial, the witnessed AIPerf-LLM runs and the Fashion-MNIST run stopped once they have
# what their tests need); the races that load exposed are fixed (a failed audit and its rejection one transaction, a
# launch that returns after its node's exclusion, a resumed run asked to stop after its duration). The cluster
# stream's output is kept in a file and printed when both have ended. Arguments go to pytest.
#
#   scripts/test-streams.sh [pytest args]      SERIAL_STREAMS=2 (default) or 1
set -uo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
passed() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }  # 5: nothing selected

if [ "${SERIAL_STREAMS:-2}" != 2 ]; then
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
echo "== the cluster stream (tests/slurm, tests/web, tests/train, the runner's container, the compose deployment), ended after" \
     "$((SECONDS - started)) s (exit status $cluster_rc):"
cat "$log"
rm -f "$log"
passed "$stack_rc" && passed "$cluster_rc"
