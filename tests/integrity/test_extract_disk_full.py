"""A full disk under the extraction target is the extractor's fault, not the bundle's (`spec.bundle.safe_extract`).

It used to be a `BundleError` ("cannot write ...: No space left on device"), which the service took
for a bad bundle: it rejected the submission and deleted its stored bundle (found by
tests/service/test_faults.py::test_media_folder_full). Needs root, to mount a 1 MiB tmpfs.
"""

from __future__ import annotations

import errno
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from aiperf_runner.spec import bundle

from tests.helpers import need_service


@pytest.fixture
def small_disk(tmp_path: Path):
    disk = tmp_path / "disk"
    disk.mkdir()
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True, text=True)
    need_service(out.returncode == 0, f"cannot mount a tmpfs (needs root): {out.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def tar_of(files: dict[str, bytes], path: Path) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("case", ["large file", "small buffered files on a full disk"])
def test_no_space_is_an_oserror_and_leaves_nothing(small_disk, tmp_path, case):
    if case == "large file":
        src = tar_of({"weights.bin": os.urandom(2 * 1024 * 1024)}, tmp_path / "b.tar.gz")
    else:
        src = tar_of({f"f{i}.txt": b"x" * 100 for i in range(20)}, tmp_path / "b.tar.gz")
        subprocess.run(["dd", "if=/dev/zero", f"of={small_disk / 'filler'}", "bs=4k"], capture_output=True)
    dest = small_disk / "out"
    with pytest.raises(OSError) as raised:
        bundle.safe_extract(src, dest)
    assert not isinstance(raised.value, bundle.BundleError)
    assert raised.value.errno == errno.ENOSPC
    assert not dest.exists()
