"""What the fuzzing of the bundle readers found (tests/fuzz/test_bundles.py), as plain tests (~2 s)."""

from __future__ import annotations

import pytest
from aiperf_runner.spec import bundle

from tests.service.conftest import new_site, upload

CUT_GZIP = b"\x1f\x8b\x08"  # a gzip header cut after its method byte: tarfile raised TypeError (ord(''))


def test_a_cut_gzip_header_is_a_bundle_error(tmp_path):
    (tmp_path / "b.tar.gz").write_bytes(CUT_GZIP)
    with pytest.raises(bundle.BundleError, match="not a valid tar bundle"):
        bundle.safe_extract(tmp_path / "b.tar.gz", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_its_upload_is_refused_not_a_server_error(transactional_db, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    site = new_site("Cut gzip site")
    resp = upload(site.client, CUT_GZIP)
    assert resp.status_code == 400, resp.content
    assert resp.json()["check"] == "bundle"
