"""Site keys: generation, files and their modes, loading, fingerprints, signatures."""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from pathlib import Path

import pytest
from aiperf_runner.spec import keys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

# RFC 8032, section 7.1, TEST 1.
RFC_SECRET = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
RFC_SIGNATURE = bytes.fromhex("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065"
                              "224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_config_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AIPERF_CONFIG_DIR", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert keys.config_dir() == tmp_path / "home" / ".config" / "aiperf"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert keys.config_dir() == tmp_path / "xdg" / "aiperf"
    monkeypatch.setenv("AIPERF_CONFIG_DIR", str(tmp_path / "explicit"))
    assert keys.config_dir() == tmp_path / "explicit"
    assert keys.default_private_path() == tmp_path / "explicit" / "site_key.pem"


def test_save_and_load_roundtrip_with_modes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AIPERF_CONFIG_DIR", str(tmp_path / "cfg"))
    key = keys.generate_key()
    old_umask = os.umask(0o077)  # the modes must not depend on the umask
    try:
        priv, pub = keys.save_key(key)
    finally:
        os.umask(old_umask)
    assert (priv, pub) == (tmp_path / "cfg" / "site_key.pem", tmp_path / "cfg" / "site_key.pub")
    assert mode(priv) == 0o600
    assert mode(pub) == 0o644
    assert mode(tmp_path / "cfg") == 0o700
    assert priv.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS8, unencrypted

    line = pub.read_text()
    assert line.endswith("\n") and line.count("\n") == 1
    prefix, b64 = line.split()
    assert prefix == "aiperf-ed25519"
    assert base64.b64decode(b64) == keys.public_bytes(key)

    loaded = keys.load_private_key()
    assert keys.public_bytes(loaded) == keys.public_bytes(key)
    assert keys.public_bytes(keys.load_public_key()) == keys.public_bytes(key)
    assert keys.public_bytes(keys.load_public_key(str(pub))) == keys.public_bytes(key)
    assert keys.public_bytes(keys.load_public_key(pub)) == keys.public_bytes(key)


def test_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    first, second = keys.generate_key(), keys.generate_key()
    priv, pub = keys.save_key(first, tmp_path)
    before = (priv.read_bytes(), pub.read_bytes())
    with pytest.raises(keys.KeyFileError, match="already exists"):
        keys.save_key(second, tmp_path)
    assert (priv.read_bytes(), pub.read_bytes()) == before

    keys.save_key(second, tmp_path, force=True)
    assert keys.public_bytes(keys.load_private_key(priv)) == keys.public_bytes(second)
    assert keys.public_bytes(keys.load_public_key(pub)) == keys.public_bytes(second)
    assert mode(priv) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site_key.pem", "site_key.pub"]  # no temp files


def test_refuses_when_only_the_public_half_exists(tmp_path: Path) -> None:
    (tmp_path / "site_key.pub").write_text("aiperf-ed25519 x\n")
    with pytest.raises(keys.KeyFileError, match="site_key.pub"):
        keys.save_key(keys.generate_key(), tmp_path)
    assert not (tmp_path / "site_key.pem").exists()


def test_fingerprint_and_signature_match_rfc8032_vector() -> None:
    key = Ed25519PrivateKey.from_private_bytes(RFC_SECRET)
    assert keys.public_bytes(key) == RFC_PUBLIC
    assert keys.fingerprint(key) == "SHA256:" + hashlib.sha256(RFC_PUBLIC).hexdigest()[:32]
    assert keys.fingerprint(RFC_PUBLIC) == keys.fingerprint(key.public_key()) == keys.fingerprint(key)
    assert len(keys.fingerprint(key)) == len("SHA256:") + 32
    assert keys.sign(key, b"") == RFC_SIGNATURE
    assert keys.verify_signature(RFC_PUBLIC, b"", RFC_SIGNATURE)
    assert not keys.verify_signature(RFC_PUBLIC, b"x", RFC_SIGNATURE)
    assert not keys.verify_signature(keys.generate_key(), b"", RFC_SIGNATURE)


def test_public_key_text_forms() -> None:
    b64 = base64.b64encode(RFC_PUBLIC).decode()
    pem = Ed25519PrivateKey.from_private_bytes(RFC_SECRET).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    for text in (f"aiperf-ed25519 {b64}", f"  aiperf-ed25519 {b64}\n", b64, pem):
        assert keys.public_bytes(keys.load_public_key(text)) == RFC_PUBLIC
    assert keys.public_line(RFC_PUBLIC) == f"aiperf-ed25519 {b64}"


@pytest.mark.parametrize("text, message", [
    ("aiperf-ed25519 not*base64", "not valid base64"),
    ("ssh-ed25519 AAAA comment", "expected 'aiperf-ed25519 <base64>'"),
    (base64.b64encode(b"short").decode(), "32 bytes"),
])
def test_bad_public_keys_are_named(text: str, message: str) -> None:
    with pytest.raises(keys.KeyFileError, match=message):
        keys.load_public_key(text)


def test_bad_private_key_files(tmp_path: Path) -> None:
    with pytest.raises(keys.KeyFileError, match="no private key at"):
        keys.load_private_key(tmp_path / "missing.pem")
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key")
    with pytest.raises(keys.KeyFileError, match="not an unencrypted PEM private key"):
        keys.load_private_key(junk)
