#!/bin/bash
# AIPerf trial t0007, attempt 2: written by aiperf-runner's slurm backend and
# submitted from the run directory with `sbatch --parsable --export=ALL --chdir=<run directory>`.
#SBATCH --job-name=aiperf.01234567.t0007
#SBATCH --output=trials/t0007/stdout.log
#SBATCH --error=trials/t0007/stderr.log
#SBATCH --open-mode=append
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --no-requeue
#SBATCH --exclusive
#SBATCH --mem=0

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

"${AIPERF_PYTHON:-python3}" -m aiperf_runner.train.trial trials/t0007 --attempt 2 --nproc 2
