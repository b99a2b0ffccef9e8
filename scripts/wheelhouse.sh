#!/usr/bin/env bash
# Build a wheelhouse: a directory of wheels from which the runner installs without an index.
#
#   scripts/wheelhouse.sh [OUT]                  (make wheelhouse; OUT defaults to build/wheelhouse)
#
# Environment:
#   TRAIN=1          include the [train] extra (torch, torchvision, optuna, scipy, safetensors)
#   PLATFORM=...     download binary wheels for another machine, e.g. manylinux2014_x86_64
#   PYTHON_VERSION=  the target's Python (with PLATFORM), e.g. 3.11
#   TORCH_INDEX=URL  where torch comes from, e.g. https://download.pytorch.org/whl/cu124 for the
#                    site's CUDA 12.4 (PyPI's default torch brings its own CUDA and NCCL)
#   PYTHON=python3   the Python whose pip builds and downloads
#
# Install on the target, with no index:
#   python -m venv venv && venv/bin/pip install --no-index --find-links OUT 'aiperf-runner[train]'
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/wheelhouse}
py=${PYTHON:-python3}
extra_name=""
[ "${TRAIN:-0}" = 1 ] && extra_name="[train]"
mkdir -p "$out"
extra=()
[ -n "${TORCH_INDEX:-}" ] && extra+=(--extra-index-url "$TORCH_INDEX")

# The runner's own wheel (pure Python: it installs on any platform). Its dependencies are then
# resolved from that file, never from an index's package of the same name.
# Built from a copy, so that setuptools' build/ and egg-info stay out of the checkout.
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp -r runner "$src/runner"
rm -rf "$src/runner/build" "$src"/runner/*.egg-info
"$py" -m pip wheel -q --no-deps --wheel-dir "$out" "$src/runner"
runner_whl=$(ls -t "$out"/aiperf_runner-*.whl | head -n 1)
want="$runner_whl$extra_name"
if [ -n "${PLATFORM:-}" ]; then
    # Another machine: binary wheels only (an sdist would have to be built there, with its compilers).
    "$py" -m pip download -q --dest "$out" --find-links "$out" --only-binary=:all: --platform "$PLATFORM" \
        --python-version "${PYTHON_VERSION:?set PYTHON_VERSION with PLATFORM}" --implementation cp \
        "${extra[@]}" "$want"
else
    # This machine's platform and Python: any sdist among the dependencies is built into a wheel.
    "$py" -m pip wheel -q --wheel-dir "$out" --find-links "$out" "${extra[@]}" "$want"
fi
ls "$out" | sed 's/^/  /'
echo "wheelhouse: $out ($(ls "$out" | wc -l) wheels, $(du -sh "$out" | cut -f1)); install with:"
echo "  pip install --no-index --find-links $out 'aiperf-runner$extra_name'"
