"""Staged data (data/staging.py): the index and manifest of a data root, staging a checked copy on a
node, refusing a copy that does not match, two stagers at once, and the ImageFolder built from the
index (same classes and samples as torchvision's own scan)."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest
from aiperf_runner.data import staging as stagedata
from aiperf_runner.data.staging import StageError
from aiperf_runner.rundir.privacy import merge_config, split_config


def _folder(root: Path) -> Path:
    """A small ImageFolder tree with the awkward cases: a nested folder inside a class (torchvision
    orders by folder, then name), a non-image file, an empty class folder in val/."""
    for rel, size in (("train/cat/b.png", 3), ("train/cat/sub/a.png", 4), ("train/cat/z.jpg", 5),
                      ("train/dog/a.JPEG", 6), ("train/dog/notes.txt", 7), ("val/cat/c.png", 8),
                      ("README", 9)):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"x" * size)
    (root / "val" / "dog").mkdir()
    return root


def test_index_matches_torchvisions_scan(tmp_path: Path) -> None:
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

    assert tuple(IMG_EXTENSIONS) == stagedata.IMG_EXTENSIONS
    root = _folder(tmp_path / "data")
    index = stagedata.build_index(root, "folder")
    assert index["files"] == [["README", 9], ["train/cat/b.png", 3], ["train/cat/sub/a.png", 4],
                              ["train/cat/z.jpg", 5], ["train/dog/a.JPEG", 6], ["train/dog/notes.txt", 7],
                              ["val/cat/c.png", 8]]
    for split in ("train", "val"):
        classes, class_to_idx = find_classes(root / split)
        assert index["folders"][split]["classes"] == classes
        theirs = make_dataset(str(root / split), class_to_idx, IMG_EXTENSIONS, allow_empty=True)
        assert [(str(root / split / rel), t) for rel, t in index["folders"][split]["samples"]] == theirs
    manifest = stagedata.manifest_of(index, root)
    assert (manifest["files"], manifest["bytes"], manifest["classes"]) == (7, 42, 2)
    assert manifest["digest"] == stagedata.digest(stagedata.build_index(root, "folder"))  # stable
    (root / "train" / "dog" / "a.JPEG").write_bytes(b"y" * 6)  # same size: the digest does not see contents
    assert stagedata.digest(stagedata.build_index(root, "folder")) == manifest["digest"]
    (root / "val" / "dog" / "d.png").write_bytes(b"z")
    assert stagedata.digest(stagedata.build_index(root, "folder")) != manifest["digest"]


def test_indexed_image_folder_is_imagefolder_without_the_scan(tmp_path: Path) -> None:
    from aiperf_runner.train.indexed_folder import IndexedImageFolder
    from PIL import Image
    from torchvision.datasets import ImageFolder

    root = tmp_path / "data"
    for rel in ("train/b/x.png", "train/b/sub/y.png", "train/a/z.png", "val/a/v.png", "val/b/w.png"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (4, 4)).save(root / rel)
    index = stagedata.build_index(root, "folder")
    for split in ("train", "val"):
        ours, theirs = IndexedImageFolder(str(root / split), index["folders"][split]), ImageFolder(str(root / split))
        assert (ours.classes, ours.class_to_idx, ours.samples) == (theirs.classes, theirs.class_to_idx, theirs.samples)
    (root / "train" / "a" / "z.png").unlink()  # the index, not the tree, says what the samples are
    assert len(IndexedImageFolder(str(root / "train"), index["folders"]["train"])) == 3
    empty = {"classes": ["a", "b"], "samples": [["b/x.png", 1]]}
    with pytest.raises(FileNotFoundError, match="no valid file for the classes a"):
        IndexedImageFolder(str(root / "train"), empty)


def test_stage_copies_once_checks_per_allocation_and_refuses_a_bad_copy(tmp_path: Path) -> None:
    root = _folder(tmp_path / "data")
    index = stagedata.build_index(root, "folder")
    where = tmp_path / "stage"
    killed = where / f".aiperf-data-{stagedata.digest(index)[:16]}.tmp-99999"  # a stager killed mid-copy
    (killed / "train").mkdir(parents=True)
    copy = stagedata.stage(root, where, index, "job1", node="n1")
    assert copy.parent == where and copy.name == "aiperf-data-" + stagedata.digest(index)[:16]
    assert stagedata.digest(stagedata.build_index(copy, "folder")) == stagedata.digest(index)
    assert (copy / "val" / "dog").is_dir()  # an empty class folder is part of the class index
    assert not [p for p in where.iterdir() if ".tmp-" in p.name]
    (root / "README").unlink()  # the source is not read again: the copy is reused
    assert stagedata.stage(root, where, index, "job2", node="n1") == copy

    (copy / "train" / "cat" / "z.jpg").write_bytes(b"longer")
    assert stagedata.stage(root, where, index, "job2", node="n1") == copy  # checked once per allocation
    with pytest.raises(StageError) as bad:
        stagedata.stage(root, where, index, "job3", node="n1")
    text = str(bad.value)
    assert "node n1" in text and "does not match the run's data manifest" in text and "Refused" in text
    assert "wrong size: train/cat/z.jpg (6 bytes, not 5)" in text
    (copy / "train" / "cat" / "z.jpg").write_bytes(b"x" * 5)
    (copy / "train" / "dog" / "a.JPEG").unlink()
    (copy / "extra.bin").write_bytes(b"")
    with pytest.raises(StageError, match=r"missing: train/dog/a.JPEG; unexpected: extra.bin"):
        stagedata.stage(root, where, index, "job4", node="n1")


def test_a_source_that_changed_is_not_staged(tmp_path: Path) -> None:
    root = _folder(tmp_path / "data")
    index = stagedata.build_index(root, "folder")
    (root / "train" / "cat" / "b.png").write_bytes(b"longer than before")
    with pytest.raises(StageError, match="changed since the run started"):
        stagedata.stage(root, tmp_path / "stage", index, "job1", node="n1")
    assert not list((tmp_path / "stage").glob("aiperf-data-*"))  # no copy takes the final name
    assert not list((tmp_path / "stage").glob(".*.tmp-*"))


def _stage_in_process(args: tuple[str, str, dict, str]) -> str:
    root, where, index, key = args
    return str(stagedata.stage(root, where, index, key, node="n1"))


def test_two_stagers_at_once_make_one_copy(tmp_path: Path) -> None:
    root = tmp_path / "data"
    for i in range(200):  # enough files that the copies would overlap without the lock
        (root / "train" / f"c{i % 4}").mkdir(parents=True, exist_ok=True)
        (root / "train" / f"c{i % 4}" / f"{i}.png").write_bytes(os.urandom(2048))
    (root / "val" / "c0").mkdir(parents=True)
    index = stagedata.build_index(root, "folder")
    with multiprocessing.get_context("fork").Pool(2) as pool:
        got = pool.map(_stage_in_process, [(str(root), str(tmp_path / "stage"), index, f"job{k}") for k in range(2)])
    assert got[0] == got[1]
    assert sorted(p.name for p in (tmp_path / "stage").iterdir() if not p.name.startswith(".")) == [Path(got[0]).name]
    assert stagedata.digest(stagedata.build_index(got[0], "folder")) == stagedata.digest(index)


def test_prepare_writes_index_and_manifest_and_the_trial_side_finds_them(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    root = _folder(tmp_path / "data")
    run_dir = tmp_path / "run"
    public, private = split_config({"data": str(root), "stage_data": str(tmp_path / "nvme" / "%n"),
                                    "backend_options": {}})
    assert public["stage_data"] is None and private["stage_data"] == str(tmp_path / "nvme" / "%n")
    assert merge_config(public, private)["stage_data"] == private["stage_data"]
    (run_dir / "local").mkdir(parents=True)
    (run_dir / "local" / "private.json").write_text(json.dumps(private))
    (run_dir / "run.json").write_text(json.dumps({"run_id": "ab" * 16}))

    class Masker:
        def text(self, s: str) -> str:
            return "MASKED:" + s.rsplit("/", 1)[-1]

    record = stagedata.start_run(run_dir, "cifar", "folder", str(root), private["stage_data"], Masker())
    assert record == {"source": "MASKED:data", "staged_to": "MASKED:%n", "kind": "folder", "files": 7, "bytes": 42,
                      "index_sha256": stagedata.read_manifest(run_dir)["digest"]}
    monkeypatch.setenv("SLURMD_NODENAME", "n7")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    copy = stagedata.stage_for_trial(run_dir)
    assert copy is not None and copy.parent == tmp_path / "nvme" / "n7"
    assert (copy.parent / f".{copy.name}.checked-run{'ab' * 8}").exists()
    assert stagedata.expand("/x/%n/%%n", "n1") == Path("/x/n1/%n")
    with pytest.raises(StageError, match="generates its data"):
        stagedata.start_run(run_dir, "smoke", "generated", None, "/nvme", Masker())
    with pytest.raises(StageError, match="absolute path"):
        stagedata.start_run(run_dir, "cifar", "folder", str(root), "nvme", Masker())


def test_the_node_a_refusal_names() -> None:
    def host(n: str) -> str:
        return {"n1": "node-aaaaaaaaaaaa", "n2.example.org": "node-bbbbbbbbbbbb"}.get(n, n)

    def error(node: str, what: str = "the staged copy .../aiperf-data-0 does not match") -> str:
        return f"StageError: node {node}: {what}"

    nodes = ["n1", "n2.example.org"]
    assert stagedata.refused_node(error("node-bbbbbbbbbbbb"), nodes, host) == "n2.example.org"  # as the log names it
    assert stagedata.refused_node(error("n2"), nodes, host) == "n2.example.org"  # raw, short
    assert stagedata.refused_node(error("n1", "cannot stage the data into /x: [Errno 28]"), nodes, host) == "n1"
    assert stagedata.refused_node(error("n3"), nodes, host) is None  # not one of the attempt's
    assert stagedata.refused_node(error("myhost"), ["localhost"], host) == "localhost"  # its one node
    assert stagedata.refused_node(error("n1", "the data under <data> changed since the run started"), nodes,
                                  host) is None  # the source's fault, not the node's
    assert stagedata.refused_node("exit status 1: OSError", ["n1"], host) is None


def test_a_refused_copy_on_the_local_backends_machine_stops_the_run(tmp_path: Path, fake_env: pytest.MonkeyPatch) -> None:
    """The local backend has no other node: the first refusal ends the run, with the reason (3 s)."""
    from aiperf_runner.run.controller import Controller, ControllerError
    from aiperf_runner.spec.eventlog import read_events

    from tests.runner.conftest import config

    root = tmp_path / "data"
    for split in ("train", "val"):
        for c in ("cat", "dog"):
            (root / split / c).mkdir(parents=True)
            (root / split / c / "a.png").write_bytes(b"x" * 64)
    fake_env.setenv("SLURMD_NODENAME", "n9")
    fake_env.delenv("SLURM_JOB_ID", raising=False)
    # A copy left by an earlier run, damaged since: the run's first check refuses it.
    copy = tmp_path / "nvme" / "n9" / f"aiperf-data-{stagedata.digest(stagedata.build_index(root, 'folder'))[:16]}"
    stagedata._copy(root, copy, stagedata.build_index(root, "folder"))
    (copy / "val" / "dog" / "a.png").unlink()
    run_dir = tmp_path / "run"
    controller = Controller.create(config(preset="cifar", backend="local", data=str(root), duration_s=60.0,
                                          stage_data=str(tmp_path / "nvme" / "%n")), run_dir)
    with pytest.raises(ControllerError, match="local backend has no other node to run on: the staged data was "
                                              "refused on node localhost: StageError: node n9: the staged copy"):
        controller.run()
    events = read_events(run_dir / "events.jsonl")
    failed = [e for e in events if e["type"] == "trial_failed"]
    assert failed and all("missing: val/dog/a.png" in e["error"] and e["retry"] for e in failed)
    assert events[-1]["type"] == "run_finished" and "missing: val/dog/a.png" in events[-1]["error"]
    assert not [e for e in events if e["type"] in ("slot_lost", "epoch_end")]
