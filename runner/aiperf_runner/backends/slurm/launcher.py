"""The site's launcher template for trials: `--prologue FILE` and `--wrap "CMD PREFIX"`.

The prologue is a shell snippet (modules, data staging, NCCL variables) that every trial's job
sources on each of the trial's nodes right before the trial program, in the shell that then starts
it, so what it exports reaches the trial. It is copied into the run directory as
`slurm-prologue.sh` when the run starts (the jobs source that copy, a resumed run keeps it, and the
published run holds what really ran); `run.json` records its digest. `wrap` is a command prefix of
the trial's processes (`apptainer exec --nv IMAGE`, `srun`-less pyxis wrappers...), recorded as
words; the wrapped process's Python is `$AIPERF_TRIAL_PYTHON` (option `trial_python`, e.g. the
container's `python3`), else the controller's. `rdzv_iface` (`--rdzv-iface`): the network interface
whose address on a multi-node trial's first node is its rendezvous (util/ifaddr.py), instead of NodeAddr.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiperf_runner.spec.bundle import LOCAL_DIR

from .options import SlurmCommonOptions

PROLOGUE_NAME = f"{LOCAL_DIR}/slurm-prologue.sh"  # never bundled: it may name the site's modules and paths


@dataclass(frozen=True)
class Launcher:
    prologue: str | None = None  # the copy's path relative to the run directory
    prologue_sha256: str | None = None
    wrap: tuple[str, ...] = ()
    trial_python: str | None = None
    rdzv_iface: str | None = None

    @classmethod
    def from_options(cls, run_dir: Path, options: SlurmCommonOptions) -> Launcher:
        """From the backend options `prologue` (a file), `wrap` (words), `trial_python` and
        `rdzv_iface`. ValueError when the prologue cannot be read."""
        source = options.prologue
        copy = Path(run_dir) / PROLOGUE_NAME
        digest = None
        if source:
            # A resumed run sources the copy it started with; a new one copies the file now.
            if not ((Path(run_dir) / "run.json").exists() and copy.is_file()):
                copy.parent.mkdir(parents=True, exist_ok=True)
                try:
                    shutil.copyfile(source, copy)
                except OSError as exc:
                    raise ValueError(f"--prologue {source}: {exc.strerror or exc}") from None
            digest = hashlib.sha256(copy.read_bytes()).hexdigest()
        return cls(prologue=PROLOGUE_NAME if source else None, prologue_sha256=digest, wrap=options.wrap,
                   trial_python=options.trial_python, rdzv_iface=_iface(options.rdzv_iface))

    def facts(self) -> dict[str, Any]:
        """run.json `system.slurm.launcher`."""
        return {"prologue": self.prologue, "prologue_sha256": self.prologue_sha256, "wrap": list(self.wrap),
                "trial_python": self.trial_python, "rdzv_iface": self.rdzv_iface}

    def env(self) -> dict[str, str]:
        """What the jobs' environment gets for the wrapped trial."""
        return {"AIPERF_TRIAL_PYTHON": self.trial_python} if self.trial_python else {}


def _iface(name: str | None) -> str | None:
    """An interface name as given, checked to be one (it goes into the batch script)."""
    if not name:
        return None
    if not re.fullmatch(r"[A-Za-z0-9_.:@-]{1,15}", name):
        raise ValueError(f"--rdzv-iface {name!r}: not a network interface name")
    return name
