"""Packed ImageFolder data (data/shards.py): every image's bytes and class back from the pack in
torchvision ImageFolder's order, the manifest's digest stable, damage caught (sizes by default, contents
with `full`), a killed pack leaving nothing under the final name; `aiperf-runner stage` and its SLURM
command line; the preset's dataset block of a pack and the verifier's checks of it. A few seconds."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import signal
import sys
import time
from pathlib import Path

import pytest
from aiperf_runner.cli.stage import srun_argv
from aiperf_runner.data import shards
from aiperf_runner.data.presets import PACK_MANIFEST, get_preset
from aiperf_runner.spec import presetfacts
from aiperf_runner.spec.errors import AiperfError
from typer.testing import CliRunner


def _tree(root: Path) -> Path:
    """An ImageFolder tree with what its scan must get right: nested folders, upper-case and other
    extensions, files ImageFolder skips, class names that sort differently from their creation."""
    files = {"train/dog/b.png": 30, "train/dog/a.JPEG": 7, "train/dog/sub/z.jpg": 11, "train/dog/notes.txt": 5,
             "train/cat/z.png": 13, "train/cat/a.webp": 3, "train/Zebra/x.bmp": 17,
             "val/dog/v.png": 19, "val/cat/w.png": 2, "val/Zebra/y.tif": 23, "README": 9}
    for i, (rel, size) in enumerate(files.items()):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes((i * 7 + k) % 256 for k in range(size)))
    return root


def test_pack_round_trip_in_imagefolders_order(tmp_path: Path) -> None:
    from torchvision.datasets import ImageFolder

    src = _tree(tmp_path / "data")
    result = shards.pack(src, tmp_path / "pack", shard_bytes=40, workers=2)
    assert result.packed and (result.images, result.shards) == (9, 5)
    manifest = result.manifest
    assert manifest["classes"] == ["Zebra", "cat", "dog"]
    assert [s["images"] for s in manifest["splits"]["train"]["shards"]] == [4, 1, 1]  # 17+3+13+7, 30, 11
    for split in ("train", "val"):
        theirs = ImageFolder(str(src / split), loader=lambda p: p)
        reader = shards.ShardReader(tmp_path / "pack", split)
        assert reader.classes == theirs.classes and len(reader) == len(theirs)
        assert reader.targets == theirs.targets
        for i, (path, target) in enumerate(theirs.samples):
            assert reader.read(i) == (Path(path).read_bytes(), target)
        clone = pickle.loads(pickle.dumps(reader))  # as a DataLoader worker gets it: maps re-opened there
        assert clone.read(len(clone) - 1) == reader.read(len(reader) - 1)
    assert not list(tmp_path.glob(".pack.tmp-*"))
    # Another pack of the same tree (another node) has the same digest; the pack is nothing but its bytes.
    again = shards.pack(src, tmp_path / "other", shard_bytes=40, workers=1)
    assert again.manifest["digest"] == manifest["digest"] == shards.manifest_digest(manifest)


def test_an_existing_pack_is_verified_not_rewritten(tmp_path: Path) -> None:
    src = _tree(tmp_path / "data")
    first = shards.pack(src, tmp_path / "pack", shard_bytes=40)
    shard = tmp_path / "pack" / "train-00000.shard"
    mtime = shard.stat().st_mtime_ns
    second = shards.pack(src, tmp_path / "pack", shard_bytes=40)
    assert not second.packed and second.manifest == first.manifest and shard.stat().st_mtime_ns == mtime
    (tmp_path / "plain").mkdir()
    with pytest.raises(shards.ShardError, match="not a pack"):
        shards.pack(src, tmp_path / "plain")


def test_damage_is_caught(tmp_path: Path) -> None:
    src = _tree(tmp_path / "data")
    shards.pack(src, tmp_path / "pack", shard_bytes=40)
    shard = tmp_path / "pack" / "train-00001.shard"
    data = bytearray(shard.read_bytes())
    data[3] ^= 0xFF  # same size: only the full check reads the contents
    shard.write_bytes(bytes(data))
    shards.verify(tmp_path / "pack")
    with pytest.raises(shards.ShardError, match="train-00001.shard: sha256 differs"):
        shards.verify(tmp_path / "pack", full=True)
    shard.write_bytes(bytes(data[:-1]))  # truncated: any check
    with pytest.raises(shards.ShardError, match="bytes, the manifest says"):
        shards.verify(tmp_path / "pack")
    manifest = json.loads((tmp_path / "pack" / shards.MANIFEST).read_text())
    manifest["splits"]["val"]["images"] = 2
    (tmp_path / "pack" / shards.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(shards.ShardError, match="digest does not match"):
        shards.verify(tmp_path / "pack")


def _pack_slowly(src: str, dst: str) -> None:
    real = shards._write_shard

    def slow(path: Path, files: list[str], sizes: list[int]) -> str:
        time.sleep(0.2)
        return real(path, files, sizes)

    shards._write_shard = slow  # type: ignore[assignment]
    shards.pack(src, dst, shard_bytes=10, workers=1)


def test_a_killed_pack_leaves_no_pack(tmp_path: Path) -> None:
    src = _tree(tmp_path / "data")
    proc = multiprocessing.get_context("fork").Process(target=_pack_slowly, args=(str(src), str(tmp_path / "pack")))
    proc.start()
    deadline = time.monotonic() + 10
    while not list(tmp_path.glob(".pack.tmp-*/train-00000.shard")) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.pid is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    assert list(tmp_path.glob(".pack.tmp-*")) and not (tmp_path / "pack").exists()
    result = shards.pack(src, tmp_path / "pack", shard_bytes=10)  # the next pack clears the killed one's
    assert result.packed and not list(tmp_path.glob(".pack.tmp-*"))
    shards.verify(tmp_path / "pack", full=True)


def test_the_preset_records_the_pack_and_the_verifier_accepts_it(tmp_path: Path) -> None:
    src = _tree(tmp_path / "data")
    digest = shards.pack(src, tmp_path / "pack").manifest["digest"]
    assert PACK_MANIFEST == shards.MANIFEST
    cifar = get_preset("cifar")
    tree, packed = cifar.dataset(str(src)), cifar.dataset(str(tmp_path / "pack"))
    assert packed == {**tree, "packed": {"digest": digest, "images": 9}}
    spec = presetfacts.get("cifar")
    assert spec is not None and presetfacts.dataset_problems(spec, packed) == []
    assert presetfacts.dataset_problems(spec, {**packed, "packed": {"digest": digest, "images": 10}}) == [
        "dataset.packed.images is 10; the data set's train_images + val_images are 9"]
    assert "dataset.packed.digest" in presetfacts.dataset_problems(spec, {**packed, "packed": {"digest": "x",
                                                                                              "images": 9}})[0]


def test_stage_command(tmp_path: Path) -> None:
    from aiperf_runner.cli import app

    src = _tree(tmp_path / "data")
    runner = CliRunner()
    out = runner.invoke(app, ["stage", "--data", str(src), "--to", str(tmp_path / "%n-pack"), "--shard-mb", "1",
                              "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    dst = Path(report["path"])
    assert dst.parent == tmp_path and dst.name.endswith("-pack") and "%" not in dst.name
    assert (report["images"], report["shards"], report["bytes"], report["packed"]) == (9, 2, 125, True)
    assert report["digest"] == shards.read_manifest(dst)["digest"]
    again = runner.invoke(app, ["stage", "--to", str(dst), "--verify-only", "--full"])
    assert again.exit_code == 0 and "verified" in again.output and report["digest"] in again.output, again.output
    (dst / "val-00000.shard").write_bytes(b"")
    bad = runner.invoke(app, ["stage", "--to", str(dst), "--verify-only"])
    assert bad.exit_code == 1 and "val-00000.shard: 0 bytes" in bad.output, bad.output


def test_a_controller_that_cannot_see_the_nodes_pack_reads_its_manifest(tmp_path: Path) -> None:
    """`stage --manifest-to` copies the manifest to shared storage; `run --data-manifest` (Preset.dataset's
    `manifest`) records the pack from it where --data is on the compute nodes only, and refuses a manifest
    that is not the pack's where the controller does see one."""
    from aiperf_runner.cli import app
    from aiperf_runner.data.presets import PresetError

    src = _tree(tmp_path / "data")
    shared = tmp_path / "shared" / "imagenet.manifest.json"
    out = CliRunner().invoke(app, ["stage", "--data", str(src), "--to", str(tmp_path / "pack"),
                                   "--manifest-to", str(shared)])
    assert out.exit_code == 0, out.output
    assert shared.read_bytes() == (tmp_path / "pack" / shards.MANIFEST).read_bytes()
    cifar = get_preset("cifar")
    seen = cifar.dataset(str(tmp_path / "pack"))
    assert cifar.dataset("/local/nvme/not-on-this-machine", str(shared)) == seen
    other = _tree(tmp_path / "other")
    (other / "val" / "dog" / "extra.png").write_bytes(b"another image")
    shards.pack(other, tmp_path / "other-pack")
    with pytest.raises(PresetError, match="is not the manifest of the pack"):
        cifar.dataset(str(tmp_path / "other-pack"), str(shared))
    shared.write_text(shared.read_text().replace('"classes"', '"klasses"'))
    with pytest.raises(PresetError, match="digest does not match"):
        cifar.dataset("/local/nvme/not-on-this-machine", str(shared))


def test_stage_on_every_node_of_the_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(AiperfError, match="inside a SLURM allocation"):
        srun_argv(["--to", "/local/%n"])
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_NNODES", "4")
    argv = srun_argv(["--to", "/local/%n", "--json"])
    assert argv == ["srun", "--nodes=4", "--ntasks=4", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
                    sys.executable, "-m", "aiperf_runner", "stage", "--to", "/local/%n", "--json"]
