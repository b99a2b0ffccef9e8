"""The `slurm` backend for the conformance suite, on the one-node cluster of scripts/slurm-cluster.sh.

Used by tests/slurm/test_conformance.py, which runs the suite of test_conformance.py against it
(the cluster must be up: skipped locally without it, failed under CI). To list it in
BACKEND_CASES instead, add `"slurm": SLURM_CASE` there (and drop tests/slurm/test_conformance.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from aiperf_runner.backends.base import Backend, load_backend

from tests.backends.conftest import BackendCase
from tests.slurm.cluster import require_one_node


def make_slurm(run_dir: Path, slots: int) -> Backend:
    conf = require_one_node()
    os.environ["SLURM_CONF"] = str(conf)  # the backend talks to the cluster of $SLURM_CONF
    # One node, several slots at once: jobs share the node instead of taking it whole.
    return load_backend("slurm")(run_dir, slots=slots, exclusive=False, probe=False, exit_file_grace_s=5)


SLURM_CASE = BackendCase(make_slurm)
