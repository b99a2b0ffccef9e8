#!/bin/bash
# AIPerf trial t0007, attempt 2: written by aiperf-runner's slurm backend and
# submitted from the run directory with `sbatch --parsable --export=ALL --chdir=<run directory>`.
#SBATCH --job-name=aiperf.01234567.t0007
#SBATCH --output=trials/t0007/stdout.log
#SBATCH --error=trials/t0007/stderr.log
#SBATCH --open-mode=append
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --no-requeue
#SBATCH --exclusive
#SBATCH --mem=0
#SBATCH --gres=gpu:4

# The exit status of the trial program, for the controller (also when the job is cancelled).
exit_file=trials/t0007/slurm-2.exit
trap 'rc=$?; printf "%s\n" "$rc" > "$exit_file.tmp" && mv -f "$exit_file.tmp" "$exit_file"' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

nodes_file=trials/t0007/slurm-2.nodes
"${AIPERF_PYTHON:-python3}" -m aiperf_runner.util.hostlist "$SLURM_JOB_NODELIST" > "$nodes_file"
echo "aiperf: trial t0007 attempt 2: SLURM job $SLURM_JOB_ID on $(paste -sd, "$nodes_file") (batch on SLURMD_NODENAME=${SLURMD_NODENAME:-?})"
# For a prologue and a wrapped trial: which trial, and its nodes (nothing of SLURM needed there).
export AIPERF_TRIAL=t0007 AIPERF_ATTEMPT=2 AIPERF_NODES="$(paste -sd, "$nodes_file")"

# One torchrun per node; they meet at a c10d rendezvous on the job's first node.
head_node=$(head -n 1 "$nodes_file")
head_addr=$("${AIPERF_PYTHON:-python3}" -m aiperf_runner.util.ifaddr ib0) || exit 2
rdzv_port=$((20000 + SLURM_JOB_ID % 10000))
srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_ON_NODE" --kill-on-bad-exit=1 --gres=gpu:4 \
    "${AIPERF_PYTHON:-python3}" -m torch.distributed.run --nnodes="$SLURM_NNODES" --nproc-per-node=4 \
    --rdzv-backend=c10d --rdzv-endpoint="${head_addr:-$head_node}:$rdzv_port" --rdzv-id="$SLURM_JOB_ID" \
    -m aiperf_runner.train.trial trials/t0007 --attempt 2
