"""`aiperf-runner flops`: the exact v1-compat vector, both graph formats, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys

from aiperf_runner.cli import app
from aiperf_runner.spec.flops import flops_per_image
from aiperf_runner.spec.graph import Graph, load_graph
from typer.testing import CliRunner

from tests.graphgen import random_graph
from tests.helpers import REPO

runner = CliRunner()


def _json(args: list[str]) -> dict:
    res = runner.invoke(app, ["flops", *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_exact_vector_subprocess(reference_resnet50) -> None:
    """The real command line, as an operator types it."""
    out = subprocess.run([sys.executable, "-m", "aiperf_runner", "flops", str(reference_resnet50),
                          "--rules", "v1-compat", "--kernel-size", "3", "--json"],
                         capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["eval_flops_per_image"] == 7806583495
    assert data["train_flops_per_image"] == 23053458315
    assert type(data["eval_flops_per_image"]) is int and type(data["train_flops_per_image"]) is int
    assert data["rules"] == "v1-compat" and data["kernel_size"] == 3 and data["layers"] == 174


def test_native_format_same_counts(reference_resnet50, tmp_path) -> None:
    native = tmp_path / "resnet50.native.json"
    native.write_text(json.dumps(load_graph(str(reference_resnet50)).to_json()))
    for path in (reference_resnet50, native):
        data = _json([str(path), "--rules", "v1-compat"])
        assert (data["eval_flops_per_image"], data["train_flops_per_image"]) == (7806583495, 23053458315)


def test_v2_default_and_per_layer(tmp_path) -> None:
    g = random_graph(9)
    path = tmp_path / "g.json"
    path.write_text(g.dumps())
    data = _json([str(path), "--per-layer"])
    want = flops_per_image(g)
    assert data["rules"] == "v2"
    assert (data["eval_flops_per_image"], data["train_flops_per_image"]) == (want.eval, want.train)
    assert data["per_layer"][-1]["type"] == "loss"
    assert sum(x["forward"] for x in data["per_layer"]) == want.eval
    res = runner.invoke(app, ["flops", str(path), "--per-layer"])
    assert res.exit_code == 0 and "eval  FLOP/image" in res.stdout and "conv2d" in res.stdout


def test_invalid_graph_exit_1_names_layer(tmp_path) -> None:
    g = random_graph(1)
    data = g.to_json()
    bad_index = next(i for i, x in enumerate(data["layers"]) if x["type"] == "batchnorm2d")
    data["layers"][bad_index]["params"]["num_features"] += 1
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    res = runner.invoke(app, ["flops", str(path), "--json"])
    assert res.exit_code == 1
    assert f"layer {bad_index} (batchnorm2d)" in res.stderr
    assert res.stdout == ""


def test_other_errors_exit_1(tmp_path) -> None:
    missing = runner.invoke(app, ["flops", str(tmp_path / "nope.json")])
    assert missing.exit_code == 1 and "cannot read" in missing.stderr
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    res = runner.invoke(app, ["flops", str(garbage)])
    assert res.exit_code == 1 and "not JSON" in res.stderr
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something-else"}))
    res = runner.invoke(app, ["flops", str(other)])
    assert res.exit_code == 1 and "unknown graph format" in res.stderr
    ok = tmp_path / "ok.json"
    ok.write_text(Graph([(3, 4, 4)], []).dumps())
    res = runner.invoke(app, ["flops", str(ok), "--rules", "v3"])
    assert res.exit_code == 1 and "v2 or v1-compat" in res.stderr
