"""`aiperf-runner estimate` (spec/estimate.py, cli/estimate.py): arithmetic, split and CLI. About 1 s."""

from __future__ import annotations

import json

from aiperf_runner.cli import app
from aiperf_runner.spec import estimate, peaks
from aiperf_runner.spec.flops import flops_per_image
from aiperf_runner.spec.llmestimate import llm_estimate
from aiperf_runner.spec.seeds import seed_for_preset
from typer.testing import CliRunner

FLOPS = flops_per_image(seed_for_preset("imagenet"), "v2")


def run(model: str, per_node: int, nodes: int, hours: float, precision: str = "bf16", startup_s: float = 0) -> dict:
    return estimate.estimate(accelerator_model=model, accelerators_per_node=per_node, nodes=nodes,
                             duration_s=hours * 3600, precision=precision, preset="imagenet",
                             train_flops=FLOPS.train, eval_flops=FLOPS.eval, first_budget=15, startup_s=startup_s)


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
    # ... but every 15-epoch trial (6 min on 8 H100s at the high end) starting cold loses its start-up
    cold = run("NVIDIA H100 80GB HBM3", 8, 512, 2, startup_s=90)
    assert 0.75 < cold["score_ops"][1] / d["score_ops"][1] < 0.85
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


def test_rounds_of_growing_budgets_start_up_and_staging() -> None:
    # A slot's trials by round: 1 h of 60-s epochs with budgets 15, 30: 15 + 30 = 45 min, then a third trial.
    assert estimate.slot_trials(3600, 60, (15, 30), 0) == (3, 1 - 30 / 3600)
    trials, counted = estimate.slot_trials(3600, 60, (15, 30), 90)
    assert trials == 3 and counted == 1 - (3 * 90 + 30) / 3600
    assert estimate.slot_trials(100, 60, (15,), 200) == (1, 0.0)  # a run shorter than one start-up counts nothing
    cold = estimate.estimate(accelerator_model="H100", accelerators_per_node=8, nodes=64, duration_s=7200,
                             precision="bf16", preset="imagenet", train_flops=FLOPS.train, eval_flops=FLOPS.eval,
                             first_budget=15, budgets=(15, 30, 45, 60), startup_s=180)
    warm = estimate.estimate(accelerator_model="H100", accelerators_per_node=8, nodes=64, duration_s=7200,
                             precision="bf16", preset="imagenet", train_flops=FLOPS.train, eval_flops=FLOPS.eval,
                             first_budget=15, budgets=(15, 30, 45, 60), startup_s=0)
    assert all(c < w for c, w in zip(cold["score_ops"], warm["score_ops"], strict=True))
    assert cold["trials_per_slot"][0] <= cold["trials_per_slot"][1]  # the faster end runs more trials
    assert cold["staging_s"] == estimate.DATA_BYTES["imagenet"] / estimate.STAGE_BYTES_PER_S
    assert any("never on its clock" in a for a in cold["assumptions"])


def test_cli_takes_the_start_up_and_the_staging_rate() -> None:
    args = ["estimate", "--accelerator-model", "H100", "--accelerators-per-node", "8", "--nodes", "4", "--json"]
    slow = json.loads(CliRunner().invoke(app, [*args, "--startup-s", "300", "--stage-mbps", "100"]).output)
    fast = json.loads(CliRunner().invoke(app, [*args, "--startup-s", "10", "--data-gb", "1"]).output)
    assert slow["startup_s"] == 300 and slow["score_ops"][1] < fast["score_ops"][1]
    assert slow["staging_s"] == 144e9 / 100e6 and fast["staging_s"] == 1e9 / estimate.STAGE_BYTES_PER_S


def test_an_llm_estimate_from_the_cli() -> None:
    """The CLI's LLM estimate is spec/llmestimate.py's (tests/runner/test_llm_estimate.py checks its figures);
    a CPU preset gets the hours and peak with no range; an image preset under --workload llm is refused."""
    cli = CliRunner()
    result = cli.invoke(app, ["estimate", "--workload", "llm", "--accelerator-model", "H100",
                              "--accelerators-per-node", "8", "--nodes", "4", "--startup-s", "30", "--json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert (d["workload"], d["preset"], d["accelerators"], d["node_hours"]) == ("llm", "llm", 32, 8)
    assert d["peak_flops"] == 32 * peaks.lookup("H100").peak_flops("bf16")
    assert d["score_ops"] == llm_estimate(accelerator_model="H100", accelerators_per_node=8, nodes=4,
                                          duration_s=7200, precision="bf16", preset="llm", startup_s=30)["score_ops"]
    text = cli.invoke(app, ["estimate", "--workload", "llm", "--accelerator-model", "H100",
                            "--accelerators-per-node", "8", "--nodes", "4"]).stdout
    assert "expected score" in text and "--nodes-per-slot 1" in text
    text = cli.invoke(app, ["estimate", "--preset", "llm-kjv", "--accelerator-model", "H100",
                            "--accelerators-per-node", "8", "--nodes", "1"]).stdout
    assert "preset llm-kjv" in text and "expected score" not in text and "preflight --workload llm" in text
    wrong = cli.invoke(app, ["estimate", "--workload", "llm", "--preset", "imagenet", "--accelerator-model", "H100",
                             "--accelerators-per-node", "8", "--nodes", "1"])
    assert wrong.exit_code == 1 and "unknown AIPerf-LLM preset 'imagenet'" in wrong.stderr
