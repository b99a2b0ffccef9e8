"""The service's imports go one way (api/views -> intake -> tasks -> pipeline -> ...) and never in a circle.

`lint-imports` (import-linter, contracts in pyproject.toml) reads every import of leaderboard/,
server/ and devdata/ — inside functions too, so a cycle cannot hide behind a late import.
"""

import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO


def test_layers_kept_and_no_import_cycles() -> None:
    out = subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 kept, 0 broken" in out.stdout, out.stdout
