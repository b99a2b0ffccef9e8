"""The batch script of one attempt of one trial (what `sbatch` runs), as text.

Paths in it are relative to the run directory (the job's working directory) and the Python is
`$AIPERF_PYTHON`, so that the script names nothing of the machine it was written on (the run
directory is published). The job's nodes are written with `python -m aiperf_runner.util.hostlist`, not
`scontrol show hostnames`, which containers on compute nodes often lack.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

# The multi-node rendezvous ports, 20000-29999: below Linux's default ephemeral range (32768-60999), where a
# busy node's own outgoing connections (and their TIME_WAIT) can hold the port a trial's store must bind. A
# local CI run drew 36358 (29500 + a hash, the range before) while another test stream's connections churned,
# and both torchruns waited as clients on a store nobody served, as when another socket holds the port.
RDZV_PORT_BASE = 20000
RDZV_PORTS = 10000
# A memory option of the site's own (`--mem-bind` is not one): then no `--mem=0` of ours.
SITE_MEMORY = re.compile(r"\s*--mem(?:-per-(?:cpu|gpu))?(?:[=\s]|$)")


def job_path(path: Path | str, run_dir: Path) -> str:
    """A path as the job sees it from the run directory: relative when inside it."""
    path = Path(os.path.abspath(path))
    for root in (Path(os.path.abspath(run_dir)), run_dir.resolve()):
        for candidate in (path, path.resolve()):
            if candidate == root or root in candidate.parents:
                return str(candidate.relative_to(root)) if candidate != root else "."
    return str(path)


def job_argv(argv: tuple[str, ...] | list[str], run_dir: Path) -> list[str]:
    """argv with absolute paths inside the run directory made relative (the job runs there)."""
    out = []
    for arg in argv:
        rel = job_path(arg, run_dir) if os.path.isabs(arg) else arg
        out.append(arg if os.path.isabs(rel) else rel)
    return out


def exclude_args(extra_sbatch_args: Sequence[str], excluded: Sequence[str]) -> list[str]:
    """sbatch's `--exclude` for the nodes the run stopped using (backend.exclude_node), given on
    the command line (the script names no host) and so overriding an `--exclude` / `-x` of the
    site's `extra_sbatch_args`: that list is kept in it."""
    if not excluded:
        return []
    site: list[str] = []
    for arg in extra_sbatch_args:
        found = re.fullmatch(r"\s*(?:--exclude[=\s]|-x\s*=?)\s*(\S+)\s*", arg)
        if found:
            site += found.group(1).split(",")
    return [f"--exclude={','.join(dict.fromkeys([*site, *excluded]))}"]


def memory_args(exclusive: bool, extra_sbatch_args: Sequence[str]) -> list[str]:
    """`--mem=0` for a job that takes its nodes whole: `--exclusive` gives it every CPU but only the
    partition's default memory, and a trial runs hundreds of loader processes. Nothing when the site
    gave its own `--mem`, `--mem-per-cpu` or `--mem-per-gpu` (extra sbatch arguments)."""
    if not exclusive or any(SITE_MEMORY.match(arg) for arg in extra_sbatch_args):
        return []
    return ["--mem=0"]


def drop_option(args: list[str], option: str) -> list[str]:
    """args without `option VALUE` / `option=VALUE`."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            out.append(arg)
    return out


def render_batch_script(*, job_name: str, trial_id: str, attempt: int, argv: list[str], stdout: str, stderr: str,
                        files_prefix: str, nodes: int = 1, devices_per_node: int = 1, gpus_per_node: int = 0,
                        partition: str | None = None, account: str | None = None, reservation: str | None = None,
                        qos: str | None = None, constraint: str | None = None, time_limit: str | None = None,
                        exclusive: bool = True, extra_sbatch_args: list[str] | tuple[str, ...] = (),
                        prologue: str | None = None, wrap: list[str] | tuple[str, ...] = (),
                        rdzv_iface: str | None = None, python: str = sys.executable) -> str:
    """The batch script of one attempt. Paths are as given (the backend passes them relative to the
    run directory, the job's working directory); `argv[0] == python` is written as "$AIPERF_PYTHON"
    (set in the job's environment by the backend; `python3` when the script is submitted by hand),
    so that no absolute path lands in the run. `prologue`: a shell file sourced on each of the
    trial's nodes before the trial program; `wrap`: a command prefix of the trial's processes
    (`apptainer exec --nv IMAGE`), whose Python is "$AIPERF_TRIAL_PYTHON" when set; `rdzv_iface`: the
    interface whose address on the batch host is a multi-node trial's rendezvous (else NodeAddr)."""
    q = shlex.quote
    py = '"${AIPERF_PYTHON:-python3}"'
    trial_py = '"${AIPERF_TRIAL_PYTHON:-${AIPERF_PYTHON:-python3}}"' if wrap else py
    words = [trial_py if i == 0 and a == python else q(a) for i, a in enumerate(argv)]
    lines = [
        "#!/bin/bash",
        f"# AIPerf trial {trial_id}, attempt {attempt}: written by aiperf-runner's slurm backend and",
        "# submitted from the run directory with `sbatch --parsable --export=ALL --chdir=<run directory>`.",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --output={stdout}",
        f"#SBATCH --error={stderr}",
        "#SBATCH --open-mode=append",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --no-requeue",
    ]
    if exclusive:
        lines.append("#SBATCH --exclusive")
    lines += [f"#SBATCH {arg}" for arg in memory_args(exclusive, extra_sbatch_args)]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    for key, value in (("account", account), ("reservation", reservation), ("qos", qos), ("constraint", constraint)):
        if value:
            lines.append(f"#SBATCH --{key}={value}")
    if gpus_per_node > 0:
        lines.append(f"#SBATCH --gres=gpu:{gpus_per_node}")
    if time_limit:
        lines.append(f"#SBATCH --time={time_limit}")
    lines += [f"#SBATCH {arg}" for arg in extra_sbatch_args]
    lines += [
        "",
        "# The exit status of the trial program, for the controller (also when the job is cancelled).",
        f"exit_file={q(files_prefix + '.exit')}",
        'trap \'rc=$?; printf "%s\\n" "$rc" > "$exit_file.tmp" && mv -f "$exit_file.tmp" "$exit_file"\' EXIT',
        "trap 'exit 143' TERM",
        "trap 'exit 130' INT",
        "",
        f"nodes_file={q(files_prefix + '.nodes')}",
        f'{py} -m aiperf_runner.util.hostlist "$SLURM_JOB_NODELIST" > "$nodes_file"',
        f'echo "aiperf: trial {trial_id} attempt {attempt}: SLURM job $SLURM_JOB_ID on'
        ' $(paste -sd, "$nodes_file") (batch on SLURMD_NODENAME=${SLURMD_NODENAME:-?})"',
        "# For a prologue and a wrapped trial: which trial, and its nodes (nothing of SLURM needed there).",
        f'export AIPERF_TRIAL={q(trial_id)} AIPERF_ATTEMPT={attempt} AIPERF_NODES="$(paste -sd, "$nodes_file")"',
        "",
    ]
    prefix = [q(w) for w in wrap]
    if prologue and "/" not in prologue:
        prologue = "./" + prologue  # `source NAME` would look for NAME on PATH first
    if nodes == 1:
        if prologue:
            lines += [
                "# The site's prologue (--prologue, kept in the run directory), sourced in this shell so that",
                "# what it exports reaches the trial; a prologue that fails fails the attempt.",
                f'source {q(prologue)} || {{ rc=$?; echo "aiperf: the prologue failed (exit $rc)" >&2; exit "$rc"; }}',
            ]
        lines.append(" ".join(prefix + words))
        return "\n".join(lines) + "\n"
    return "\n".join(lines + _multi_node_lines(argv, words, trial_py, devices_per_node, gpus_per_node, prologue,
                                                 prefix, rdzv_iface)) + "\n"


def _multi_node_lines(argv: list[str], words: list[str], trial_py: str, devices_per_node: int, gpus_per_node: int,
                      prologue: str | None, prefix: list[str], rdzv_iface: str | None = None) -> list[str]:
    """One srun task per node (each sourcing the prologue, then the wrapped program)."""
    q = shlex.quote
    srun = ['srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_ON_NODE"',
            "--kill-on-bad-exit=1"]
    if gpus_per_node > 0:
        srun.append(f"--gres=gpu:{gpus_per_node}")
    if prologue:
        prefix = ["bash -c " + q(f'source {q(prologue)} && exec "$@"') + " aiperf-prologue", *prefix]
    lines = [
        "# One torchrun per node; they meet at a c10d rendezvous on the job's first node.",
        'head_node=$(head -n 1 "$nodes_file")',
    ]
    if rdzv_iface:  # the batch script runs on the job's first node: its address on that interface
        lines.append(f'head_addr=$("${{AIPERF_PYTHON:-python3}}" -m aiperf_runner.util.ifaddr {q(rdzv_iface)}) || exit 2')
    else:  # NodeAddr where the SLURM client is there (containers may lack it), else the node's name.
        lines.append("head_addr=$(scontrol show node \"$head_node\" -o 2>/dev/null | tr ' ' '\\n' | "
                     "sed -n 's/^NodeAddr=//p')")
    lines.append(f"rdzv_port=$(({RDZV_PORT_BASE} + SLURM_JOB_ID % {RDZV_PORTS}))")
    if len(argv) >= 3 and argv[1] == "-m":
        # torchrun's parser would take the program's `--nproc` for an abbreviation of its own
        # --nproc-per-node; under torchrun the program takes torchrun's process count anyway.
        program = [q(a) for a in drop_option(argv[1:], "--nproc")]
        lines.append(" \\\n    ".join(filter(None, [
            " ".join(srun),
            " ".join(prefix),
            f'{trial_py} -m torch.distributed.run --nnodes="$SLURM_NNODES" --nproc-per-node={devices_per_node}',
            '--rdzv-backend=c10d --rdzv-endpoint="${head_addr:-$head_node}:$rdzv_port" --rdzv-id="$SLURM_JOB_ID"',
            " ".join(program),
        ])))
    else:  # not a `python -m` program: srun starts every rank itself (SLURM_PROCID...)
        lines.append(" \\\n    ".join(filter(None, [
            " ".join(srun).replace("--ntasks-per-node=1", f"--ntasks-per-node={devices_per_node}"),
            " ".join(prefix),
            'env MASTER_ADDR="${head_addr:-$head_node}" MASTER_PORT="$rdzv_port"',
            " ".join(words),
        ])))
    return lines
