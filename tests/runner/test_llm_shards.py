"""AIPerf-LLM's token shards (data/llmshards.py) and the shard presets (`llm`, `llm-bytes`): llm.c's shard format
read and written, the manifest's digest stable and binding (a changed byte names its shard), the reader's windows
the very tokens, `stage --workload llm` in both its forms, the run refusing shards its preset does not bind before
anything starts, the verifier's check of a shard run's data block, and the trainer drawing from one byte shard
exactly what it draws from the same bytes. A few seconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiperf_runner.data import llmshards
from aiperf_runner.data.llmshards import MANIFEST, ShardError
from aiperf_runner.spec import llmverify
from aiperf_runner.spec.llmrules import LLM_PRESETS, PROBE_SEQUENCES, RULES, llm_preset
from typer.testing import CliRunner

TEXT = bytes(range(32, 127)) * 3000  # 285,000 bytes, every window different from its neighbours


def _text(tmp_path: Path, data: bytes = TEXT, parts: int = 3) -> list[Path]:
    """`data` in `parts` files under tmp_path/text (their names sort in order)."""
    folder = tmp_path / "text"
    folder.mkdir(exist_ok=True)
    cut = len(data) // parts
    files = []
    for i in range(parts):
        path = folder / f"part{i}.txt"
        path.write_bytes(data[i * cut:(i + 1) * cut if i < parts - 1 else len(data)])
        files.append(path)
    return files


def _llm_c_shard(path: Path, tokens: np.ndarray, magic: int = 20240520, version: int = 1) -> None:
    """A shard as llm.c's dev/data/data_common.py `write_datafile` writes it (gpt-2: uint16 tokens)."""
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = magic, version, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def _gpt2_shards(root: Path, val: int = 5000, train: tuple[int, ...] = (7000, 3000)) -> Path:
    """llm.c's names: the first shard the validation split, the others training; tokens below GPT-2's 50257."""
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    _llm_c_shard(root / "fineweb_val_000000.bin", rng.integers(0, 50257, val))
    for i, n in enumerate(train, 1):
        _llm_c_shard(root / f"fineweb_train_{i:06d}.bin", rng.integers(0, 50257, n))
    return root


def test_shards_are_llm_c_files_holding_the_text(tmp_path: Path) -> None:
    result = llmshards.write_shards(_text(tmp_path), tmp_path / "shards", val_tokens=65_536, shard_tokens=100_000)
    assert result.written and result.files == 3
    names = sorted(p.name for p in (tmp_path / "shards").iterdir())
    assert names == [MANIFEST, "text_train_000001.bin", "text_train_000002.bin", "text_train_000003.bin",
                     "text_val_000000.bin"]
    held = b""
    for name in ["text_val_000000.bin", *names[1:4]]:  # in the text's order: validation first, as llm.c
        raw = (tmp_path / "shards" / name).read_bytes()
        header = np.frombuffer(raw[:1024], dtype="<i4")
        assert (header[0], header[1]) == (20240520, 1) and not header[3:].any()
        tokens = np.frombuffer(raw[1024:], dtype="<u2")
        assert header[2] == len(tokens) and llmshards.read_header(tmp_path / "shards" / name) == len(tokens)
        held += tokens.astype(np.uint8).tobytes()
    assert held == TEXT
    manifest = llmshards.verify(tmp_path / "shards")
    assert (manifest["tokenizer"], manifest["vocab"], manifest["splits"]["val"]["tokens"]) == ("bytes", 256, 65_536)
    assert manifest["splits"]["train"]["tokens"] == len(TEXT) - 65_536
    assert [s["tokens"] for s in manifest["splits"]["train"]["shards"]] == [100_000, 100_000, len(TEXT) - 265_536]
    assert not list(tmp_path.glob(".shards.tmp-*"))
    again = llmshards.write_shards(_text(tmp_path), tmp_path / "shards")  # already there: verified, not rewritten
    assert not again.written and again.manifest == manifest
    with pytest.raises(ShardError, match="only 'bytes'"):
        llmshards.write_shards(_text(tmp_path), tmp_path / "gpt2", tokenizer="gpt2")
    with pytest.raises(ShardError, match="nothing is left to train on"):
        llmshards.write_shards(_text(tmp_path), tmp_path / "short", val_tokens=len(TEXT))


def test_a_directory_is_read_in_order_and_a_linked_file_once(tmp_path: Path) -> None:
    files = _text(tmp_path)
    (tmp_path / "text" / "zz-link.txt").symlink_to(files[0])
    assert llmshards.text_files([tmp_path / "text"]) == files
    assert llmshards.text_files([files[2], tmp_path / "text"]) == [files[2], files[0], files[1]]
    with pytest.raises(ShardError, match="no such file"):
        llmshards.text_files([tmp_path / "missing"])


def test_bad_shards_are_named(tmp_path: Path) -> None:
    root = _gpt2_shards(tmp_path / "gpt2")
    bad = root / "fineweb_train_000001.bin"
    raw = bad.read_bytes()
    bad.write_bytes(raw[:-2])
    with pytest.raises(ShardError, match=r"fineweb_train_000001.bin: 15022 bytes, its header says 7000 tokens "
                                         r"\(15024 bytes\): truncated"):
        llmshards.read_header(bad)
    _llm_c_shard(bad, np.zeros(10), magic=20240522)
    with pytest.raises(ShardError, match="fineweb_train_000001.bin: magic 20240522"):
        llmshards.write_manifest(root, "gpt2", 50257)
    _llm_c_shard(bad, np.zeros(10), version=7)
    with pytest.raises(ShardError, match="version 7"):
        llmshards.read_header(bad)
    _llm_c_shard(bad, np.array([1, 50257]))
    with pytest.raises(ShardError, match="fineweb_train_000001.bin: token 50257 is outside a vocabulary of 50257"):
        llmshards.write_manifest(root, "gpt2", 50257)
    with pytest.raises(ShardError, match="vocabulary is 50257, not 50000"):
        llmshards.write_manifest(root, "gpt2", 50000)
    only_train = tmp_path / "no-val"
    only_train.mkdir()
    _llm_c_shard(only_train / "a.bin", np.zeros(10))
    with pytest.raises(ShardError, match="no val shard"):
        llmshards.write_manifest(only_train, "gpt2", 50257)


def test_the_digest_is_stable_and_binds_every_byte(tmp_path: Path) -> None:
    a = llmshards.write_shards(_text(tmp_path), tmp_path / "a").manifest
    b = llmshards.write_shards(_text(tmp_path), tmp_path / "b").manifest  # elsewhere, later: the same digest
    assert a["digest"] == b["digest"] == llmshards.manifest_digest(a)
    assert llmshards.write_manifest(tmp_path / "a", "bytes", 256) == a  # written again from the shards: the same
    assert json.loads((tmp_path / "a" / MANIFEST).read_text()) == a
    other = llmshards.write_shards(_text(tmp_path, TEXT[:-1]), tmp_path / "c").manifest
    assert other["digest"] != a["digest"]

    shard = tmp_path / "a" / "text_train_000001.bin"
    raw = bytearray(shard.read_bytes())
    raw[5000] ^= 1  # one bit of one token
    shard.write_bytes(bytes(raw))
    llmshards.verify(tmp_path / "a", full=False)  # sizes and headers: unchanged
    with pytest.raises(ShardError, match="text_train_000001.bin: sha256 differs from the manifest's"):
        llmshards.verify(tmp_path / "a")
    llmshards.verify(tmp_path / "a", splits=("val",))  # the audit's check: the validation shards alone

    (tmp_path / "b" / "text_train_000009.bin").write_bytes(llmshards.header(0))
    with pytest.raises(ShardError, match="text_train_000009.bin: a shard the manifest does not list"):
        llmshards.verify(tmp_path / "b")
    (tmp_path / "b" / "text_train_000009.bin").unlink()
    (tmp_path / "b" / "text_train_000001.bin").unlink()
    with pytest.raises(ShardError, match="text_train_000001.bin: missing"):
        llmshards.verify(tmp_path / "b")
    manifest = tmp_path / "c" / MANIFEST
    manifest.write_text(manifest.read_text().replace('"vocab": 256', '"vocab": 512'))
    with pytest.raises(ShardError, match="digest does not match its content"):
        llmshards.verify(tmp_path / "c")
    with pytest.raises(ShardError, match="no manifest"):
        llmshards.read_manifest(tmp_path / "text")


def test_the_readers_windows_are_the_tokens(tmp_path: Path) -> None:
    llmshards.write_shards(_text(tmp_path), tmp_path / "s", val_tokens=65_536, shard_tokens=100_000)
    train = llmshards.TokenShards(tmp_path / "s", "train")
    body = TEXT[65_536:]
    assert train.tokens == len(body)
    seq = 64
    sizes = [100_000, 100_000, len(body) - 200_000]
    assert train.window_count(seq) == sum(n - seq for n in sizes)
    # window i: numbered shard after shard, each inside its shard
    for i, (shard, start) in {0: (0, 0), 99_935: (0, 99_935), 99_936: (1, 0), 199_872: (2, 0),
                              train.window_count(seq) - 1: (2, sizes[2] - seq - 1)}.items():
        at = sum(sizes[:shard]) + start
        window = train.windows([i], seq)[0]
        assert window.dtype == np.int64 and bytes(window.astype(np.uint8)) == body[at:at + seq + 1], i
    x, y = train.batch([3, 7], seq)
    assert x.shape == y.shape == (2, seq) and (x[:, 1:] == y[:, :-1]).all()
    with pytest.raises(IndexError):
        train.windows([train.window_count(seq)], seq)
    val = llmshards.TokenShards(tmp_path / "s", "val")
    assert bytes(val.head(1000).astype(np.uint8)) == TEXT[:1000]
    with pytest.raises(ShardError, match="holds 65,536 tokens"):
        val.head(65_537)
    # the GPT-2 shards of llm.c: tokens past 255, windows across two training shards of different sizes
    root = _gpt2_shards(tmp_path / "gpt2")
    tokens = np.concatenate([np.fromfile(root / f"fineweb_train_00000{i}.bin", dtype="<u2", offset=1024)
                             for i in (1, 2)])
    gpt2 = llmshards.TokenShards(root, "train", llmshards.write_manifest(root, "gpt2", 50257))
    assert gpt2.window_count(1024) == (7000 - 1024) + (3000 - 1024)
    assert (gpt2.windows([5976], 1024)[0] == tokens[7000:7000 + 1025]).all()
    assert gpt2.windows([5975], 1024)[0].max() > 255


def test_stage_writes_shards_of_text_and_manifests_of_llm_c_shards(tmp_path: Path) -> None:
    from aiperf_runner.cli import app

    runner = CliRunner()
    files = _text(tmp_path)
    out = runner.invoke(app, ["stage", "--workload", "llm", "--data", str(files[0]), "--data", str(tmp_path / "text"),
                              "--to", str(tmp_path / "shards"), "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert (report["written"], report["tokenizer"], report["vocab"], report["val_tokens"]) == (True, "bytes", 256,
                                                                                                65_536)
    assert report["train_tokens"] == len(TEXT) - 65_536  # part0.txt named twice: read once
    assert report["digest"] == llmshards.read_manifest(tmp_path / "shards")["digest"]
    again = runner.invoke(app, ["stage", "--workload", "llm", "--to", str(tmp_path / "shards"), "--verify-only"])
    assert again.exit_code == 0 and "verified (every shard hashed)" in again.output, again.output
    assert report["digest"] in again.output

    root = _gpt2_shards(tmp_path / "gpt2")
    made = runner.invoke(app, ["stage", "--workload", "llm", "--manifest", str(root), "--tokenizer", "gpt2"])
    assert made.exit_code == 0, made.output
    assert "3 shards, 10,000 training and 5,000 validation tokens (gpt2, vocabulary 50,257)" in made.output
    assert llmshards.verify(root)["vocab"] == 50257
    for argv, message in [
        (["--manifest", str(root)], "--manifest needs --tokenizer"),
        (["--manifest", str(root), "--tokenizer", "mine"], "give its vocabulary with --vocab"),
        (["--data", str(files[0]), "--to", str(tmp_path / "x"), "--tokenizer", "gpt2"], "only 'bytes'"),
        (["--to", str(tmp_path / "x")], "give --data TEXT_FILES_OR_DIR"),
        (["--data", str(files[0]), "--to", str(tmp_path / "x"), "--slurm"], "for image packs"),
    ]:
        bad = runner.invoke(app, ["stage", "--workload", "llm", *argv])
        assert bad.exit_code == 1 and message in bad.output, (argv, bad.output)
    image = runner.invoke(app, ["stage", "--manifest", str(root), "--tokenizer", "gpt2"])
    assert image.exit_code == 1 and "for --workload llm" in image.output, image.output


def _dataset(preset: str, **facts: Any) -> dict[str, Any]:
    base = {"digest": "ab" * 32, "train_tokens": 2_000_000_000, "val_tokens": 100_000_000, "train_shards": 20,
            "val_shards": 1}
    return {**llm_preset(preset).to_json(), **base, **facts}


def _run(preset: str, dataset: dict[str, Any]) -> dict[str, Any]:
    return {"workload": "llm", "preset": preset, "rules": RULES, "dataset": dataset}


def test_the_verifier_holds_a_shard_runs_data_to_its_preset() -> None:
    preset, problems = llmverify._preset(_run("llm", _dataset("llm")))
    assert preset is llm_preset("llm") and problems == []
    for facts, named in [({"tokenizer": "bytes"}, "dataset tokenizer 'bytes' is not the preset's 'gpt2'"),
                         ({"vocab": 50304}, "dataset vocab 50304"), ({"format": "other/1"}, "dataset format"),
                         ({"eval_tokens": 1000}, "dataset eval_tokens 1000"),
                         ({"val_tokens": 10_000_000}, "dataset val_tokens 10000000: the preset's evaluation reads "
                                                      "10,485,760"),
                         ({"train_tokens": 999_999_999}, "dataset train_tokens 999999999"),
                         ({"train_tokens": True}, "dataset train_tokens True"),
                         ({"digest": None}, "dataset digest None"), ({"digest": "AB" * 32}, "dataset digest"),
                         ({"digest": "ab" * 31}, "dataset digest")]:
        assert any(named in p for p in llmverify._preset(_run("llm", _dataset("llm", **facts)))[1]), (facts, named)
    # a byte preset's block on a shard preset: no digest, no counts
    assert len(llmverify._preset(_run("llm", llm_preset("llm-smoke").to_json()))[1]) >= 5
    assert llmverify._preset(_run("llm", "not a block"))[1] == ["dataset is str, not an object"]
    assert llmverify._preset(_run("llm-bytes", _dataset("llm-bytes", val_tokens=65_536,
                                                        train_tokens=131_072)))[1] == []
    # the byte presets as before: their digests and sizes
    assert llmverify._preset(_run("llm-kjv", llm_preset("llm-kjv").to_json()))[1] == []
    assert llmverify._preset(_run("llm-smoke", {**llm_preset("llm-smoke").to_json(), "val_sha256": "0" * 64}))[1] \
        == [f"dataset val_sha256 {'0' * 64!r} is not the preset's {llm_preset('llm-smoke').val_sha256!r}"]


def test_the_shard_presets_are_consistent() -> None:
    from aiperf_runner.run.llmrun import _hparam_options

    for name in ("llm", "llm-bytes"):
        preset = llm_preset(name)
        assert preset.shards is not None and preset.train_sha256 is None
        arch = preset.seed_arch
        assert arch.vocab == preset.shards.vocab == llmshards.TOKENIZERS[preset.shards.tokenizer]
        assert preset.shards.eval_tokens >= PROBE_SEQUENCES * arch.seq_len  # the growth check's probe batch
        assert len(arch.layers) <= preset.max_layers and preset.min_duration_s <= preset.default_duration_s
        assert all(b % (arch.seq_len * world) == 0 for b in preset.batch_tokens for world in (1, 2, 4, 8))
        assert preset.gate_reason and set(preset.to_json()) >= {"format", "tokenizer", "vocab", "eval_tokens"}
    gpt2 = llm_preset("llm")
    assert (gpt2.seed_arch.d_model, gpt2.seed_arch.seq_len, len(gpt2.seed_arch.layers)) == (768, 1024, 12)
    space = _hparam_options(gpt2)["space"]
    assert space.defaults["lr"] == gpt2.seed_lr and space.defaults["batch_tokens"] == 65536
    assert _hparam_options(llm_preset("llm-kjv")) == {"batch_tokens": (2048, 4096, 8192)}  # as before
    assert {n for n, p in LLM_PRESETS.items() if p.shards is None} == {"llm-smoke", "llm-kjv"}


def test_a_run_refuses_shards_its_preset_does_not_bind(tmp_path: Path) -> None:
    from aiperf_runner.run.llmrun import LlmRun, LlmRunConfig, LlmRunError

    def create(preset: str, data: Path | None) -> None:
        LlmRun.create(LlmRunConfig(preset=preset, data=str(data) if data else None), tmp_path / "run",
                      say=lambda _: None)

    with pytest.raises(LlmRunError, match="llm trains on token shards: give --data DIR"):
        create("llm", None)
    with pytest.raises(LlmRunError, match="llm-smoke makes its own text: --data is for the shard presets"):
        create("llm-smoke", tmp_path)
    with pytest.raises(LlmRunError, match="aiperf-llm-shards.json: no manifest"):
        create("llm-bytes", tmp_path)
    root = _gpt2_shards(tmp_path / "gpt2")
    llmshards.write_manifest(root, "gpt2", 50257)
    with pytest.raises(LlmRunError, match="do not fit the llm-bytes preset: dataset tokenizer 'gpt2'"):
        create("llm-bytes", root)
    with pytest.raises(LlmRunError, match="the preset's evaluation reads 10,485,760 validation tokens"):
        create("llm", root)
    llmshards.write_shards(_text(tmp_path), tmp_path / "bytes")
    shard = tmp_path / "bytes" / "text_val_000000.bin"
    raw = bytearray(shard.read_bytes())
    raw[2000] ^= 1
    shard.write_bytes(bytes(raw))
    with pytest.raises(LlmRunError, match="text_val_000000.bin: sha256 differs"):
        create("llm-bytes", tmp_path / "bytes")
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_one_byte_shard_trains_as_its_bytes() -> None:
    """The trainer's windows from a shard reader are the ones it draws from the same bytes: the same seed, the
    same losses and weights; the frozen evaluation of the tokens as an array is that of the bytes."""
    torch = pytest.importorskip("torch")
    from aiperf_runner.spec.llmflops import LlmArch, LlmLayer
    from aiperf_runner.train.llm.trainer import Budget, LlmHparams, evaluate, new_session, train

    class OneShard:  # what TokenShards is for a corpus of one shard, without files
        def __init__(self, data: bytes) -> None:
            self.tokens = np.frombuffer(data, dtype=np.uint8).astype(np.uint16)

        def window_count(self, seq_len: int) -> int:
            return len(self.tokens) - seq_len

        def windows(self, index: np.ndarray, seq_len: int) -> np.ndarray:
            return np.stack([self.tokens[i:i + seq_len + 1] for i in index]).astype(np.int64)

    arch = LlmArch(vocab=256, d_model=32, seq_len=16, layers=(LlmLayer(2, 8, 64),))
    hp = LlmHparams(batch_tokens=64, warmup_steps=2)
    data, val = TEXT[:20_000], TEXT[20_000:21_000]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs = []
        for train_data, val_data in ((data, val), (OneShard(data), np.frombuffer(val, dtype=np.uint8))):
            session = new_session(arch, hp, seed=3)
            result = train(session, train_data, hp, Budget(steps=6), seed=5, val=val_data)
            runs.append((result, session.model.state_dict()))
        (a, wa), (b, wb) = runs
        assert (a.train_loss, a.val_loss, a.train_tokens, a.flops) == (b.train_loss, b.val_loss, b.train_tokens,
                                                                       b.flops)
        assert all(torch.equal(wa[k], wb[k]) for k in wa)
        model = new_session(arch, hp, seed=4).model
        assert evaluate(model, val) == evaluate(model, np.frombuffer(val, dtype=np.uint8).astype(np.uint16))
    finally:
        torch.set_num_threads(threads)
