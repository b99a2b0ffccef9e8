"""The "a log field" recipe of docs/internals.md ("Extending"), followed once on a copy of the runner:
a required field `steps` added to `epoch_end` by one line in spec/records.py (`EpochEnd`). In that
copy, the schema requires it, the fast path decodes it into a column of its own and rebuilds lines
with it, and a line without it is refused: nothing else was edited."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers import REPO

ANCHOR = "    seconds: float = dataclasses.field(metadata=meta(number(\"seconds\"), NUMBER))\n"
ADDED = "    steps: int = dataclasses.field(metadata=meta(nonneg(\"steps\"), COUNT))\n"

CHECK = textwrap.dedent("""
    import json, sys
    from aiperf_runner.spec import epochscan, schema
    from aiperf_runner.spec.eventlog import EventWriter
    from aiperf_runner.spec.records import EpochEnd

    assert "steps" in [f.name for f in schema.EVENTS["epoch_end"].fields if f.required]
    assert "steps" in epochscan.Plain.__struct_fields__ and "steps" in epochscan.INT_FIELDS
    epoch = dict(trial="t0001", attempt=1, epoch=1, images_trained=100, images_evaluated=10,
                 val_accuracy=0.5, val_loss=1.0, started_at=10.0, ended_at=11.0, seconds=1.0)
    try:
        EpochEnd(**epoch)
        raise SystemExit("a record without the new required field was built")
    except TypeError:
        pass
    log = sys.argv[1]
    with EventWriter(log, durability="none") as w:
        for n in (1, 2):
            w.append("epoch_end", **EpochEnd(**{**epoch, "epoch": n, "steps": 7 * n}).as_event())
    scan = epochscan.scan_chunk(log, 0, len(open(log, "rb").read()))
    assert scan.clean and scan.rows is not None, "the new field's lines left the fast path"
    assert list(scan.rows.steps) == [7, 14]
    chunk = epochscan.Chunk(1, scan.lines, "0" * 64, scan.digests, [], [], scan.rows, scan.trials)
    assert chunk.row_dicts() == [json.loads(x) for x in open(log, "rb").read().splitlines()]
    line = {**epoch, "seq": 1, "t": 11.5, "type": "epoch_end", "prev": "0" * 64}
    assert schema.problem(line) is not None and "steps" in schema.problem(line)
    assert schema.problem({**line, "steps": 3}) is None
    print("ok")
""")


def test_a_field_added_by_the_recipe_reaches_schema_and_fast_path(tmp_path: Path) -> None:
    copy = tmp_path / "runner"
    shutil.copytree(REPO / "runner" / "aiperf_runner", copy / "aiperf_runner",
                    ignore=shutil.ignore_patterns("__pycache__"))
    records = copy / "aiperf_runner" / "spec" / "records.py"
    text = records.read_text()
    assert ANCHOR in text, "EpochEnd's fields moved: update docs/internals.md and this test"
    records.write_text(text.replace(ANCHOR, ANCHOR + ADDED, 1))
    env = {**os.environ, "PYTHONPATH": str(copy)}
    out = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path / "events.jsonl")], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
