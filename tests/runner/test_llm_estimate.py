"""spec/llmestimate.py: an AIPerf-LLM run's score range from the reference throughput, trials and start-up."""

from __future__ import annotations

import pytest
from aiperf_runner.spec import peaks
from aiperf_runner.spec.llmestimate import LLM_REFERENCES, eval_tokens, llm_estimate, slot_trials
from aiperf_runner.spec.llmflops import train_flops_per_token
from aiperf_runner.spec.llmrules import llm_preset

PRESET = llm_preset("llm")
SEED = train_flops_per_token(PRESET.seed_arch)
H100 = peaks.lookup("H100").peak_flops("bf16")


def estimate(nodes: int = 4, hours: float = 2, startup_s: float = 90, **kw) -> dict:
    return llm_estimate(accelerator_model="H100", accelerators_per_node=8, nodes=nodes, duration_s=hours * 3600,
                        precision="bf16", preset="llm", startup_s=startup_s, **kw)


def test_the_reference_is_llm_c_s_gpt2_run_with_the_seeds_llm_v1_flops() -> None:
    expected = 10e9 * SEED.train / (90 * 60) / (8 * 312e12)  # 10B tokens in 90 min on 8 A100s, bf16 dense
    assert LLM_REFERENCES["llm"].efficiency(SEED.train) == pytest.approx(expected, rel=1e-12)
    assert 0.5 < expected < 0.65  # llm.c's ~60 % model FLOPs utilisation
    # GPT-2 small's matrix multiplies: 12 blocks of 4 x 768^2 + 2 x 768 x 3072, an untied head of 768 x 50,257
    weights = 12 * (4 * 768 ** 2 + 2 * 768 * 3072) + 768 * 50257
    attention = 12 * 2 * 2 * 768 * (1024 + 1) / 2  # causal QK^T and AV per token
    assert SEED.train == 3 * (2 * weights + attention)


def test_score_is_finished_trials_tokens_over_the_run() -> None:
    d = estimate()
    low_eff, high_eff = d["efficiency"]
    assert low_eff == pytest.approx(0.3 * high_eff)
    node_peak = 8 * H100
    evaluation = eval_tokens(PRESET) * SEED.forward
    for eff, batch, score in ((low_eff, 65536, d["score_ops"][0]), (high_eff, 262144, d["score_ops"][1])):
        trained = PRESET.steps_per_trial * batch * SEED.train
        trial_s = 90 + (trained + evaluation) / (node_peak * eff)
        assert score == pytest.approx(4 * (7200 // trial_s) * trained / 7200)
    assert d["split"]["nodes_per_slot"] == 1 and d["split"]["slots"] == 4
    assert d["score_ops"][1] < d["peak_flops"] * high_eff  # start-up and evaluation are never counted


def test_start_up_and_the_trial_under_way_at_the_end_cost_score() -> None:
    assert estimate(startup_s=300)["score_ops"][1] < estimate(startup_s=10)["score_ops"][1]
    assert slot_trials(100, 40) == 2 and slot_trials(79, 40) == 1  # the trial under way at the end counts nothing
    too_short = estimate(nodes=1, hours=60 / 3600)  # no trial finishes in a minute after 90 s of start-up
    assert too_short["score_ops"] == [0, 0] and "too short" in too_short["split"]["reason"]
    assert any("fail validity.duration" in a for a in too_short["assumptions"])


def test_staging_the_bound_tokens_and_cpu_presets() -> None:
    d = estimate(stage_bytes_per_s=100e6)
    bound = PRESET.shards.min_train_tokens + PRESET.shards.eval_tokens
    assert d["staging_s"] == pytest.approx(2 * bound / 100e6)
    assert estimate(data_bytes=50e9)["staging_s"] == pytest.approx(50e9 / 500e6)
    kjv = llm_estimate(accelerator_model="H100", accelerators_per_node=8, nodes=1, duration_s=3600,
                       precision="bf16", preset="llm-kjv")
    assert kjv["score_ops"] is None and kjv["split"] is None and kjv["workload"] == "llm"
