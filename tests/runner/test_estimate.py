"""`aiperf-runner estimate` (spec/estimate.py, cli/estimate.py): arithmetic, split and CLI. About 1 s."""

from __future__ import annotations

import json

from aiperf_runner.cli import app
from aiperf_runner.spec import estimate, peaks
from aiperf_runner.spec.flops import flops_per_image
from aiperf_runner.spec.seeds import seed_for_preset
from typer.testing import CliRunner

FLOPS = flops_per_image(seed_for_preset("imagenet"), "v2")


def run(model: str, per_node: int, nodes: int, hours: float, precision: str = "bf16") -> dict:
    return estimate.estimate(accelerator_model=model, accelerators_per_node=per_node, nodes=nodes,
                             duration_s=hours * 3600, precision=precision, preset="imagenet",
                             train_flops=FLOPS.train, eval_flops=FLOPS.eval, first_budget=15)


def test_reference_efficiency_is_the_mlperf_time_with_the_seeds_flops() -> None:
    ref = estimate.REFERENCES["imagenet"]
    images = 35 * 1_281_167
    expected = images * FLOPS.train / (13.466 * 60) / (8 * 989.4e12)
    assert abs(ref.efficiency(1_281_167, FLOPS.train) - expected) < 1e-12
    assert 0.1 < expected < 0.25  # ResNet-50 at ~6,900 images/s per H100


def test_node_hours_peak_and_score_range() -> None:
    d = run("NVIDIA H100 80GB HBM3", 8, 512, 2)
    assert d["node_hours"] == 1024 and d["accelerator_hours"] == 8192
    assert d["peak_flops"] == peaks.accelerator_peak("H100", "bf16", 4096)
    low, high = d["efficiency"]
    assert low == high * estimate.REFERENCES["imagenet"].low_share
    assert d["score_ops"][0] < low * d["peak_flops"] and d["score_ops"][1] < high * d["peak_flops"]
    assert d["score_ops"][1] > 0.95 * high * d["peak_flops"]  # a 2-hour run loses little to its last epochs
    assert d["split"] == {**d["split"], "nodes_per_slot": 1, "slots": 512}
    assert any("MLPerf" in a for a in d["assumptions"]) and any("not measured" in a for a in d["assumptions"])


def test_a_slow_node_gets_more_nodes_per_slot_and_too_short_a_run_is_said() -> None:
    assert run("A100 40GB", 4, 64, 2)["split"]["nodes_per_slot"] > 1
    assert run("A100 40GB", 4, 64, 12)["split"]["nodes_per_slot"] == 1
    short = run("V100", 1, 1, 0.5, precision="fp16")["split"]
    assert short["trials_per_slot"] < estimate.MIN_TRIALS_PER_SLOT and "too short" in short["reason"]


def test_cli_text_json_and_errors() -> None:
    cli = CliRunner()
    args = ["estimate", "--accelerator-model", "MI250X", "--accelerators-per-node", "8", "--nodes", "1",
            "--duration", "2h"]
    text = cli.invoke(app, args)
    assert text.exit_code == 0 and "expected score:" in text.output and "assumptions:" in text.output
    data = json.loads(cli.invoke(app, [*args, "--json"]).output)
    assert data["accelerator"] == "AMD Instinct MI250X" and data["node_hours"] == 2
    bad = cli.invoke(app, ["estimate", "--accelerator-model", "Z9000", "--accelerators-per-node", "8", "--nodes", "1"])
    assert bad.exit_code == 1 and "not in the peak table" in bad.output
    cifar = json.loads(cli.invoke(app, [*args, "--preset", "cifar", "--json"]).output)
    assert cifar["score_ops"] is None and any("no reference" in a for a in cifar["assumptions"])
