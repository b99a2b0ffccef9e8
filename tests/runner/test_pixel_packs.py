"""Pixel packs (`aiperf-runner stage --decoded`, data/shards.py): the manifest names the decoder, the index
holds each image's height and width and is checked against its bytes, a pack of the other kind at --to is
refused, the run records the decoder and refuses to read the pack with another, and `integrity.bound`
holds run.json to it. A few seconds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from aiperf_runner.cli import app
from aiperf_runner.cli.stage import _options, pixel_decoder
from aiperf_runner.data import shards
from aiperf_runner.data.presets import get_preset
from aiperf_runner.spec import presetfacts
from aiperf_runner.spec.errors import AiperfError
from aiperf_runner.spec.verify import verify
from aiperf_runner.train.decode import tensor_from_pixels
from typer.testing import CliRunner

from devdata.runfactory import DEFAULT_DATASET, make_run

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")


def _tree(root: Path) -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", 3), ("val", 1)):
        for cls in ("cat", "dog"):
            folder = root / split / cls
            folder.mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (20 + i, 30, 3), dtype=np.uint8)).save(folder / f"{i}.jpg")
    return root


def test_stage_decoded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIPERF_DATA_DECODER", raising=False)
    src, dst = _tree(tmp_path / "tree"), tmp_path / "pack"
    runner = CliRunner()
    out = runner.invoke(app, ["stage", "--data", str(src), "--to", str(dst), "--decoded", "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert (report["pixels"], report["images"], report["packed"]) == ("tensor", 8, True)
    assert report["bytes"] == 2 * (3 * 30 * (20 + 21 + 22) + 3 * 30 * 20)  # every image's height x width x 3
    again = runner.invoke(app, ["stage", "--data", str(src), "--to", str(dst), "--decoded"])
    assert again.exit_code == 0 and "verified" in again.output and "(images decoded by tensor)" in again.output
    for argv, message in (([], "holds images decoded by tensor, not the files' bytes: remove it"),
                          (["--decoded", "--decoder", "pil"], "holds images decoded by tensor, not images decoded by pil"),
                          (["--decoder", "pil"], "--decoder names the decoder of --decoded: give --decoded too"),
                          (["--decoded", "--decoder", "jpegli"], "--decoder 'jpegli': one of")):
        bad = runner.invoke(app, ["stage", "--data", str(src), "--to", str(dst), *argv])
        assert bad.exit_code == 1 and message in bad.output, (argv, bad.output)
    assert _options(src, "/local/%n", 256, 8, False, False, False, decoded="pil")[-3:] == ["--decoded", "--decoder", "pil"]


def _rewrite_index(pack: Path, split: str, table: np.ndarray) -> None:
    """The index replaced and the manifest made consistent with it (its sha256, the digest): damage that only
    the index's own checks can find."""
    manifest = json.loads((pack / shards.MANIFEST).read_text())
    index = pack / manifest["splits"][split]["index"]["name"]
    np.save(index, table, allow_pickle=False)
    manifest["splits"][split]["index"].update(sha256=shards._sha256_file(index), bytes=index.stat().st_size)
    manifest["digest"] = shards.manifest_digest(manifest)
    (pack / shards.MANIFEST).write_text(json.dumps(manifest))


def test_a_pixel_packs_index_and_manifest_are_checked(tmp_path: Path) -> None:
    pack = shards.pack(_tree(tmp_path / "tree"), tmp_path / "pack", pixels=pixel_decoder("pil")).path
    table = np.load(pack / "train.index.npy")
    assert table.shape == (6, 6) and list(table[0, 4:]) == [20, 30]
    reader = shards.ShardReader(pack, "train")
    assert reader.pixels == "pil" and reader.shape(2) == (22, 30) and len(reader.read(2)[0]) == 22 * 30 * 3
    view, _target = reader.read(2)  # a writable view of the shard's map, not a copy ...
    assert isinstance(view, memoryview) and not view.readonly
    before = (pack / "train-00000.shard").read_bytes()
    tensor_from_pixels(view, 22, 30).fill_(7)  # ... and copy-on-write: what a loader does to it never reaches the pack
    assert bytes(view[:3]) == b"\x07\x07\x07" and (pack / "train-00000.shard").read_bytes() == before
    shards.verify(pack, full=True)
    swapped = table.copy()
    swapped[0, 4], swapped[0, 5] = 30, 21  # 630 pixels, not the 600 the bytes hold
    _rewrite_index(pack, "train", swapped)
    with pytest.raises(shards.ShardError, match="an image's bytes are not its height x width x 3"):
        shards.verify(pack)
    _rewrite_index(pack, "train", table[:, :4].copy())  # a pixel pack's index without heights and widths
    with pytest.raises(shards.ShardError, match=r"train index: shape \(6, 4\)"):
        shards.verify(pack)
    manifest = json.loads((pack / shards.MANIFEST).read_text())
    del manifest["pixels"]
    manifest["digest"] = shards.manifest_digest(manifest)
    (pack / shards.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(shards.ShardError, match="a pixel pack names its decoder"):
        shards.read_manifest(pack)
    with pytest.raises(AiperfError, match="--decoder 'png'"):
        pixel_decoder("png")


def test_the_run_records_the_pixel_pack_and_refuses_another_decoder(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pack = shards.pack(_tree(tmp_path / "tree"), tmp_path / "pack", pixels=pixel_decoder("tensor"))
    dataset = get_preset("cifar").dataset(str(pack.path))
    assert dataset["packed"] == {"digest": pack.manifest["digest"], "images": 8, "pixels": "tensor"}
    spec = presetfacts.get("cifar")
    assert spec is not None and presetfacts.dataset_problems(spec, dataset) == []
    monkeypatch.setenv("AIPERF_DATA_DECODER", "pil")
    out = CliRunner().invoke(app, ["run", "--preset", "cifar", "--data", str(pack.path), "--out", str(tmp_path / "run"),
                                   "--duration", "10s"])
    assert out.exit_code == 1, out.output
    assert ("holds images decoded by tensor at staging, but this run decodes with pil: set "
            "AIPERF_DATA_DECODER=tensor") in out.output
    assert not (tmp_path / "run" / "run.json").exists()


def test_the_verifier_holds_the_decoder_to_the_pixel_pack(tmp_path: Path) -> None:
    def bound(run: Path) -> dict:
        return next(c for c in verify(run)["checks"] if c["name"] == "integrity.bound")

    images = DEFAULT_DATASET["train_images"] + DEFAULT_DATASET["val_images"]
    for pixels, passed in (("tensor", True), ("pil", False)):  # the factory's runs decode with tensor
        packed = {"digest": "ab" * 32, "images": images, "pixels": pixels}
        check = bound(make_run(tmp_path / pixels, trials=2, dataset={**DEFAULT_DATASET, "packed": packed}).path)
        assert check["passed"] is passed, check["message"]
    assert ("run.json dataset.packed.pixels 'pil': a pack of images decoded by 'pil' at staging, read by a run whose "
            "decoder is 'tensor'") in check["message"]
