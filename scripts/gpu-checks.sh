#!/usr/bin/env bash
# The checks that need a CUDA GPU, prepared as one command for a lent GPU machine: such a machine is lent for
# minutes, cannot reach any index, and has its own Python with PyTorch. Each step has its own time limit; a
# step that fails is recorded (its exit status in OUT/summary.txt) and the next one runs.
#
#   make gpu-wheels                            here: the runner's wheel and the wheels the GPU image lacks,
#                                              for its Python (3.12), into .gpu-wheels/ (git-ignored)
#   bash scripts/gpu-checks.sh OUT             there, from the repository root, with .gpu-wheels carried:
#                                              at most 9.5 minutes (the step limits add up to 550 s)
#   GPU_CHECKS_CPU=1 PYTHON=.venv/bin/python bash scripts/gpu-checks.sh OUT
#                                              here: the same steps in their small CPU forms, no install
#
# Every step's output goes to OUT/checks.txt (its command first), its exit status and time to OUT/summary.txt,
# run.json of the GPU run to OUT/smoke-run.json: a lent machine sends back at most 8 files. Steps:
#   gpus, env    nvidia-smi; Python, torch and torchvision versions, the device torch sees
#   data-path    bench/data_path.py --device cuda: the device decoder (nvJPEG) as a trial runs it: decode, train
#                and val images/s, and its validation images against the pil reference (the rules' tolerance)
#   gpu-trial    bench/gpu_trial.py: the seed trial's images/s against torchvision's reference loop, bf16; then
#                fed by a pack of JPEGs through build_data with the tensor and the device decoder
#   llm-trial    bench/gpu_trial.py --workload llm: tokens/s and MFU of the AIPerf-LLM trainer
#   preflight    aiperf-runner preflight --json on the node's device
#   smoke-run    aiperf-runner run --preset smoke --slots 1 --duration 40s on the GPU, then verify: the runner
#                runs on CUDA unchanged, and run.json records the device, precision and decoder
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-checks.sh OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cpu=${GPU_CHECKS_CPU:-0}
summary="$out/summary.txt"
: > "$summary"

if [ "$cpu" = 1 ]; then
    py=${PYTHON:-.venv/bin/python}
    runner="$(dirname "$py")/aiperf-runner"
else
    # The image's python3 (itself a venv) holds torch and torchvision: the runner goes into it, beside them (a
    # venv made from it would not see them; the machine is given back afterwards). The runner from this checkout
    # (built with the image's setuptools), else the wheel `make gpu-wheels` built (the checkout as it was then);
    # its dependencies from the carried wheels.
    py=$(python3 -c 'import sys; print(sys.executable)')
    pip=("$py" -m pip install -q --no-index --pre --find-links .gpu-wheels)  # --pre: the one cffi downloaded is a beta
    if "${pip[@]}" --no-build-isolation ./runner optuna > "$out/install.txt" 2>&1; then
        echo "install: the runner from ./runner" >> "$summary"
    elif "${pip[@]}" aiperf-runner optuna >> "$out/install.txt" 2>&1; then
        echo "install: the runner's wheel from .gpu-wheels (./runner did not build: install.txt)" >> "$summary"
    else
        echo "install: FAILED (install.txt)" >> "$summary"
        exit 1
    fi
    runner="$(dirname "$py")/aiperf-runner"
fi

log="$out/checks.txt"
: > "$log"

step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    local started=$SECONDS
    { echo; echo "==== $name"; echo "\$ $*"; } >> "$log"
    timeout --kill-after=10 "$limit" "$@" >> "$log" 2>&1
    local rc=$?
    echo "$name: exit $rc after $((SECONDS - started)) s (limit $limit s)" | tee -a "$summary"
}

[ "$cpu" = 1 ] || step gpus 20 nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv
step env 40 "$py" -c 'import sys, torch, torchvision
print("python", sys.version.split()[0], "torch", torch.__version__, "torchvision", torchvision.__version__)
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")'
if [ "$cpu" = 1 ]; then
    step data-path 120 "$py" bench/data_path.py --images 60 --rounds 1
    step device-decoder 120 "$py" bench/data_path.py --device-decoder --images 60 --rounds 1
    step gpu-trial 120 "$py" bench/gpu_trial.py --tiny --data-path 64 --timeout 100
    step llm-trial 120 "$py" bench/gpu_trial.py --workload llm --tiny --timeout 100
    step preflight 120 "$runner" preflight --preset smoke --json
else
    step data-path 70 "$py" bench/data_path.py --device cuda --images 600 --batch 256
    step gpu-trial 150 "$py" bench/gpu_trial.py --steps 20 --data-path 2560 --timeout 140
    step llm-trial 90 "$py" bench/gpu_trial.py --workload llm --timeout 80
    step preflight 60 "$runner" preflight --json
fi
run_dir="$out/smoke-run"
rm -rf "$run_dir"
step smoke-run 90 "$runner" run --preset smoke --slots 1 --duration 40s --out "$run_dir" --progress plain --offline
step smoke-verify 30 "$runner" verify "$run_dir"
cp "$run_dir/run.json" "$out/smoke-run.json" 2>> "$log"
rm -rf "$run_dir"  # the files back from OUT are few and small
