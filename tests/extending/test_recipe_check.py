"""The "a check" recipe of docs/internals.md ("Extending"), followed once on a copy of the runner: a
validity check `validity.trials` (at least N trials finished) added in the two places the recipe
names (its function and threshold in spec/rules.py, one line in its group in spec/verify.py), then
`aiperf-runner verify --json` of a run shows it with its threshold, measured value and outcome,
and every other check exactly as before. The recipe stays true as long as this passes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO
from tests.integrity.rundir import make_run

RULES_FUNCTION = '''

def check_trials(finished: int, th: Mapping[str, Any]) -> dict[str, Any]:
    need = th["min_trials_finished"]
    return check("validity.trials", need, finished, finished >= need,
                 f"{finished} trials finished (at least {need})")
'''
THRESHOLD_ANCHOR = '        "min_max_accuracy": 0.70,\n'
VALIDITY_ANCHOR = "            R.check_complete(f.replay.finished_at is not None)]"


def _follow_the_recipe(copy: Path) -> None:
    rules = copy / "aiperf_runner" / "spec" / "rules.py"
    text = rules.read_text()
    assert THRESHOLD_ANCHOR in text, "the recipe's threshold table moved: update docs/internals.md and this test"
    rules.write_text(text.replace(THRESHOLD_ANCHOR, THRESHOLD_ANCHOR + '        "min_trials_finished": 2,\n', 1)
                     + RULES_FUNCTION)
    verify = copy / "aiperf_runner" / "spec" / "verify.py"
    text = verify.read_text()
    assert VALIDITY_ANCHOR in text, "the validity group moved: update docs/internals.md and this test"
    verify.write_text(text.replace(VALIDITY_ANCHOR, VALIDITY_ANCHOR[:-1] + ",\n"
                                   "            R.check_trials(f.acc.trials_finished, th)]", 1))


def _verify(run: Path, runner_root: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(runner_root)}
    out = subprocess.run([sys.executable, "-m", "aiperf_runner", "verify", "--json", str(run)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.stdout, out.stderr
    return json.loads(out.stdout)


def test_a_check_added_by_the_recipe_reaches_the_report(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    copy = tmp_path / "runner"
    shutil.copytree(REPO / "runner" / "aiperf_runner", copy / "aiperf_runner",
                    ignore=shutil.ignore_patterns("__pycache__"))
    _follow_the_recipe(copy)
    before = _verify(run, REPO / "runner")
    after = _verify(run, copy)
    added = [c for c in after["checks"] if c["name"] == "validity.trials"]
    assert len(added) == 1
    assert added[0]["threshold"] == 2 and added[0]["measured"] == before["trials_finished"]
    assert added[0]["passed"] is (before["trials_finished"] >= 2)
    others = [c for c in after["checks"] if c["name"] != "validity.trials"]
    assert others == before["checks"]
