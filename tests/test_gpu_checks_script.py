"""scripts/gpu-checks.sh fits the one call a lent GPU machine gives (600 s): its GPU steps' time limits add up to
less, with room for the install, and every file it names exists here."""

from __future__ import annotations

import re
import subprocess

from tests.helpers import REPO

SCRIPT = REPO / "scripts" / "gpu-checks.sh"
CALL_LIMIT_S = 600
INSTALL_S = 45  # pip from the carried wheels, the runner built from ./runner


def gpu_steps() -> dict[str, int]:
    """{step: limit} of the steps a GPU machine runs (the CPU forms' branch left out)."""
    text = SCRIPT.read_text()
    cpu_branch = text[text.index('if [ "$cpu" = 1 ]; then\n    step'):text.index("\nelse\n    step")]
    steps = re.findall(r"step ([a-z-]+) (\d+) ", text.replace(cpu_branch, ""))
    return {name: int(limit) for name, limit in steps}


def test_the_gpu_steps_fit_one_call() -> None:
    steps = gpu_steps()
    assert {"gpus", "env", "data-path", "gpu-trial", "llm-trial", "preflight", "smoke-run", "smoke-verify"} <= set(steps)
    assert sum(steps.values()) + INSTALL_S < CALL_LIMIT_S, steps


def test_the_script_parses_and_names_what_exists() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    for path in re.findall(r"\b(bench/[a-z_]+\.py)", SCRIPT.read_text()):
        assert (REPO / path).is_file(), path
