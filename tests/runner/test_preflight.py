"""`aiperf-runner preflight` measures this node for real (cifar's seed trial, both decoders on JPEGs it makes or on
a site's own tree) and its prediction follows from its own figures."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from tests.runner.conftest import cli


def test_preflight_measures_and_predicts_from_its_measurements():
    done = cli("preflight", "--preset", "cifar", "--steps", "2", "--images", "8", "--decode-seconds", "0.3",
               "--nodes", "4", "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    trial, decode = out["seed_trial"], out["decode"]
    assert out["torch_import_s"] > 0 and trial["first_step_s"] > 0 and trial["images_per_s"] > 0
    assert trial["precision"] == "fp32" and out["device"] == "cpu"  # auto: fp32 without a GPU
    assert set(decode["per_core"]) == {"tensor", "pil", "device"} and min(decode["per_core"].values()) > 0
    # the device decoder decodes in the run: no pixel pack of its images, its batches' rate on the device
    assert set(decode["per_core_decoded"]) == {"tensor", "pil"} and out["decoded"] is False
    assert decode["on_device"] > 0
    # nothing left to decode: every decoder's loader is faster from its pixel pack
    assert all(rate > decode["per_core"][name] for name, rate in decode["per_core_decoded"].items())
    assert decode["source"] == "made here" and decode["images"] == 8 and decode["mean_bytes"] > 20_000
    assert out["data_images_per_s"] == pytest.approx(decode["per_core"][out["decoder"]] * out["loader_cores"])
    node = min(out["compute_images_per_s"], out["data_images_per_s"])
    assert out["node_images_per_s"] == pytest.approx(node)
    assert out["limited_by"] == ("data" if node < out["compute_images_per_s"] else "compute")
    high = node * trial["train_flops_per_image"] * 4
    assert out["score_ops"] == pytest.approx([high / 2, high])


def test_preflight_reads_a_sites_own_images_and_says_so_in_text(tmp_path):
    rng = np.random.default_rng(0)
    for i in range(3):
        folder = tmp_path / "train" / f"c{i}"
        folder.mkdir(parents=True)
        Image.fromarray(rng.integers(0, 255, (64, 80, 3), dtype=np.uint8)).save(folder / "a.jpg", quality=90)
    done = cli("preflight", "--preset", "cifar", "--steps", "1", "--decode-seconds", "0.2", "--data", str(tmp_path),
               "--decoded")
    assert done.returncode == 0, done.stderr
    assert "3 JPEGs" in done.stdout and str(tmp_path) in done.stdout
    assert "from a pixel pack of them (stage --decoded): tensor" in done.stdout
    assert "cores, from a pixel pack (stage --decoded))" in done.stdout
    assert "limited by" in done.stdout and "expected score:" in done.stdout


def test_preflight_with_the_device_decoder():
    done = cli("preflight", "--preset", "cifar", "--steps", "1", "--images", "6", "--decode-seconds", "0.2", "--json",
               env={"AIPERF_DATA_DECODER": "device"})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    decode = out["decode"]
    assert out["decoder"] == "device"
    assert out["data_images_per_s"] == pytest.approx(min(decode["per_core"]["device"] * out["loader_cores"],
                                                         decode["on_device"] * out["devices"]))
    wrong = cli("preflight", "--preset", "cifar", "--decoded", env={"AIPERF_DATA_DECODER": "device"})
    assert wrong.returncode == 1 and "not the device decoder's" in wrong.stderr


def test_preflight_refuses_an_unknown_preset():
    done = cli("preflight", "--preset", "nope")
    assert done.returncode == 1 and "nope" in done.stderr


def test_preflight_of_an_llm_preset_measures_the_seed_transformer():
    """--workload llm: the preset's seed model in the trainer's own steps on this node's device, tokens/s, and a score
    range from that rate and the seed's llm-v1 FLOPs per token; no decoding (text is a memory read)."""
    from aiperf_runner.spec.llmflops import train_flops_per_token
    from aiperf_runner.spec.llmrules import llm_preset

    done = cli("preflight", "--workload", "llm", "--preset", "llm-smoke", "--steps", "3", "--nodes", "2", "--json",
               timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    trial = out["seed_trial"]
    assert (out["workload"], out["preset"], out["device"], "decode" in out) == ("llm", "llm-smoke", "cpu", False)
    assert trial["batch_tokens"] == llm_preset("llm-smoke").batch_tokens[0] and trial["precision"] == "fp32"
    assert trial["tokens_per_s"] > 0 and trial["first_step_s"] > 0 and trial["mfu"] is None
    assert trial["train_flops_per_token"] == train_flops_per_token(llm_preset("llm-smoke").seed_arch).train
    high = out["node_tokens_per_s"] * trial["train_flops_per_token"] * 2
    assert out["score_ops"] == pytest.approx([high / 2, high])
    text = cli("preflight", "--workload", "llm", "--preset", "llm-smoke", "--steps", "1")
    assert text.returncode == 0 and "tokens/s per device" in text.stdout and "AIPerf-LLM preset llm-smoke" in text.stdout
    wrong = cli("preflight", "--workload", "llm", "--preset", "cifar")
    assert wrong.returncode == 1 and "unknown AIPerf-LLM preset 'cifar'" in wrong.stderr
