"""llm-kjv's text (data/llmtext.py): the King James Bible extracted from Debian's bible-kjv-text by the
bible-kjv package's `bible` reader, deterministically, bound to the preset's digests; a missing package is
a TextError that says what to install. The tests that need the packages skip without them. About a second.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from aiperf_runner.data import llmtext
from aiperf_runner.data.llmtext import TextError, extract_kjv, kjv_data, kjv_text, sha256
from aiperf_runner.spec.llmrules import llm_preset

KJV_BYTES, KJV_SHA256, KJV_NAME = llmtext.KJV_BYTES, llmtext.KJV_SHA256, llmtext.KJV_NAME
KJV_DATA_DIR, KJV_DATA_FILE = llmtext.KJV_DATA_DIR, llmtext.KJV_DATA_FILE

INSTALLED = shutil.which(llmtext.KJV_COMMAND) is not None and (Path(KJV_DATA_DIR) / KJV_DATA_FILE).is_file()
needs_bible = pytest.mark.skipif(not INSTALLED, reason="Debian's bible-kjv and bible-kjv-text are not installed "
                                                       "(apt-get install bible-kjv bible-kjv-text)")
HINT = "apt-get install bible-kjv bible-kjv-text"


@needs_bible
def test_extraction_is_deterministic_and_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = extract_kjv()
    monkeypatch.chdir(tmp_path)
    (tmp_path / KJV_DATA_FILE).write_bytes(b"not the bible")  # `-p` keeps the working directory's out
    monkeypatch.setenv("COLUMNS", "40")  # would set -l's width: removed from the reader's environment
    second = extract_kjv()
    assert first == second
    assert len(first) == KJV_BYTES and sha256(first) == KJV_SHA256
    lines = first.split(b"\n")
    assert lines[0] == b"Ge1:1 In the beginning God created the heaven and the earth."
    assert lines[-2] == b"Rev22:21 The grace of our Lord Jesus Christ be with you all. Amen." and lines[-1] == b""
    assert len(lines) - 1 == 31_102  # every verse, one a line
    assert max(first) < 128  # ASCII


@needs_bible
def test_split_matches_the_preset(tmp_path: Path) -> None:
    preset = llm_preset("llm-kjv")
    data = kjv_data(cache_dir=tmp_path)
    assert preset.data == KJV_NAME == data.name
    assert (len(data.train), len(data.val)) == (preset.train_bytes, preset.val_bytes)
    assert (data.train_sha256, data.val_sha256) == (preset.train_sha256, preset.val_sha256)
    assert data.train + data.val == kjv_text(cache_dir=tmp_path)


@needs_bible
def test_cache_is_written_once_and_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = kjv_text(cache_dir=tmp_path)
    (cached,) = tmp_path.iterdir()
    assert cached.name == f"kjv-{KJV_SHA256[:24]}.txt" and cached.read_bytes() == text
    assert os.stat(cached).st_mode & 0o777 == 0o644

    def no_extraction(*_args: object) -> bytes:
        raise AssertionError("extracted although the cache holds the text")

    monkeypatch.setattr(llmtext, "extract_kjv", no_extraction)
    assert kjv_text(cache_dir=tmp_path) == text
    cached.write_bytes(text[:-1] + b"?")  # a damaged copy is not used: the text is extracted again
    monkeypatch.undo()
    assert kjv_text(cache_dir=tmp_path) == text and cached.read_bytes() == text


def test_missing_reader_names_the_packages(tmp_path: Path) -> None:
    with pytest.raises(TextError, match="bible-kjv package") as err:
        extract_kjv(command="aiperf-no-such-bible-reader")
    assert HINT in str(err.value)
    with pytest.raises(TextError, match="bible-kjv package"):  # nothing cached: the reader is needed
        kjv_text(command="aiperf-no-such-bible-reader", cache_dir=tmp_path / "empty")


def test_missing_text_names_the_package(tmp_path: Path) -> None:
    reader = tmp_path / "bible"
    reader.write_text("#!/bin/sh\nexit 0\n")  # a stand-in reader: the data file is what is missing
    reader.chmod(0o755)
    with pytest.raises(TextError, match=r"bible\.data, from Debian's bible-kjv-text") as err:
        extract_kjv(command=str(reader), data_dir=tmp_path / "nowhere")
    assert HINT in str(err.value)


def test_a_reader_that_prints_nothing_is_an_error(tmp_path: Path) -> None:
    reader = tmp_path / "bible"
    reader.write_text("#!/bin/sh\necho 'Cannot open data file bible.data' >&2\nexit 0\n")
    reader.chmod(0o755)
    (tmp_path / KJV_DATA_FILE).write_bytes(b"")
    with pytest.raises(TextError, match="Cannot open data file") as err:
        extract_kjv(command=str(reader), data_dir=tmp_path)
    assert HINT in str(err.value)


@needs_bible
def test_trial_reads_the_preset_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from aiperf_runner.train.llm.trialmain import preset_data

    monkeypatch.setenv("AIPERF_CACHE_DIR", str(tmp_path))
    preset = llm_preset("llm-kjv")
    data = preset_data(preset)
    assert (data.train_sha256, data.val_sha256) == (preset.train_sha256, preset.val_sha256)
    assert [p.name for p in tmp_path.iterdir()] == [f"kjv-{KJV_SHA256[:24]}.txt"]
