"""The site's Ed25519 signing key: generation, files, fingerprints, signatures.

Files (in `config_dir()`):

- `site_key.pem`: the private key, PKCS8 PEM, unencrypted, mode 0600. Never leaves the site.
- `site_key.pub`: one line `aiperf-ed25519 <base64 of the 32 raw public-key bytes>`; this is what
  the site registers with the AIPerf service.

Fingerprint: `SHA256:` + the first 32 hex characters of SHA-256 of the 32 raw public-key bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from aiperf_runner.spec.errors import AiperfError

PRIVATE_FILE = "site_key.pem"
PUBLIC_FILE = "site_key.pub"
PUBLIC_PREFIX = "aiperf-ed25519"

PublicKeyLike = Ed25519PublicKey | Ed25519PrivateKey | bytes


class KeyFileError(AiperfError, ValueError):
    """A key file that is missing, unreadable, malformed, or that would be overwritten."""


def config_dir() -> Path:
    """`$AIPERF_CONFIG_DIR`, else `$XDG_CONFIG_HOME/aiperf`, else `~/.config/aiperf`."""
    if os.environ.get("AIPERF_CONFIG_DIR"):
        return Path(os.environ["AIPERF_CONFIG_DIR"]).expanduser()
    if os.environ.get("XDG_CONFIG_HOME"):
        return Path(os.environ["XDG_CONFIG_HOME"]).expanduser() / "aiperf"
    return Path.home() / ".config" / "aiperf"


def default_private_path() -> Path:
    return config_dir() / PRIVATE_FILE


def default_public_path() -> Path:
    return config_dir() / PUBLIC_FILE


def generate_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


# ---- encodings ---------------------------------------------------------------------------------
def public_bytes(key: PublicKeyLike) -> bytes:
    """The 32 raw public-key bytes of a public key, of a private key's public half, or raw bytes."""
    if isinstance(key, Ed25519PrivateKey):
        key = key.public_key()
    if isinstance(key, Ed25519PublicKey):
        return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    raw = bytes(key)
    if len(raw) != 32:
        raise KeyFileError(f"an Ed25519 public key has 32 bytes, got {len(raw)}")
    return raw


def public_b64(key: PublicKeyLike) -> str:
    return base64.b64encode(public_bytes(key)).decode("ascii")


def public_line(key: PublicKeyLike) -> str:
    """The content of `site_key.pub` (without the newline)."""
    return f"{PUBLIC_PREFIX} {public_b64(key)}"


def fingerprint(key: PublicKeyLike) -> str:
    return "SHA256:" + hashlib.sha256(public_bytes(key)).hexdigest()[:32]


def private_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def parse_public_key(text: str) -> Ed25519PublicKey:
    """Read `aiperf-ed25519 <base64>`, a bare base64 key, or a PEM `PUBLIC KEY` block."""
    text = text.strip()
    if text.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_public_key(text.encode())
        except ValueError as exc:
            raise KeyFileError(f"not a valid PEM public key ({exc})") from None
        if not isinstance(key, Ed25519PublicKey):
            raise KeyFileError("the PEM public key is not an Ed25519 key")
        return key
    parts = text.split()
    if len(parts) == 2 and parts[0] == PUBLIC_PREFIX:
        b64 = parts[1]
    elif len(parts) == 1:
        b64 = parts[0]
    else:
        raise KeyFileError(f"expected '{PUBLIC_PREFIX} <base64>' or a base64 key, got {text[:60]!r}")
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise KeyFileError(f"public key is not valid base64: {b64[:60]!r}") from None
    return Ed25519PublicKey.from_public_bytes(public_bytes(raw))


# ---- files -------------------------------------------------------------------------------------
def _write_new(path: Path, data: bytes, mode: int, force: bool) -> None:
    """Write `data` to `path` with `mode` from the first byte; atomically replace only with `force`."""
    if force:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        target = tmp
    else:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        target = path
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(target, mode)  # O_CREAT's mode is filtered by the umask
        if force:
            os.replace(tmp, path)
    except BaseException:
        target.unlink(missing_ok=True)
        raise


def save_key(key: Ed25519PrivateKey, directory: str | Path | None = None,
             force: bool = False) -> tuple[Path, Path]:
    """Write `site_key.pem` (0600) and `site_key.pub` (0644); return their paths.

    Refuses (KeyFileError) to replace an existing key unless `force`: a registered key that is
    overwritten can no longer sign results the service accepts.
    """
    directory = Path(directory) if directory is not None else config_dir()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    priv, pub = directory / PRIVATE_FILE, directory / PUBLIC_FILE
    if not force:
        for path in (priv, pub):
            if path.exists() or path.is_symlink():
                raise KeyFileError(f"a site key already exists at {path}")
    try:
        _write_new(priv, private_pem(key), 0o600, force)
    except FileExistsError:
        raise KeyFileError(f"a site key already exists at {priv}") from None
    _write_new(pub, (public_line(key) + "\n").encode("ascii"), 0o644, force=True)
    return priv, pub


def load_private_key(path: str | Path | None = None) -> Ed25519PrivateKey:
    """The private key at `path` (default: the config directory's `site_key.pem`)."""
    path = Path(path) if path is not None else default_private_path()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        hint = " (run `aiperf-runner keygen` to create the site key)" if path == default_private_path() else ""
        raise KeyFileError(f"no private key at {path}{hint}") from None
    except OSError as exc:
        raise KeyFileError(f"cannot read private key {path}: {exc.strerror}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{path} is not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path} holds a {type(key).__name__}, not an Ed25519 key")
    return key


def load_public_key(source: str | Path | PublicKeyLike | None = None) -> Ed25519PublicKey:
    """A public key from a key object, raw bytes, a file (`site_key.pub`, PEM) or the key text itself.

    `None` reads the config directory's `site_key.pub`. A string that names an existing file is
    read as that file; any other string is parsed as the key (`aiperf-ed25519 <b64>` or bare b64).
    """
    if isinstance(source, Ed25519PublicKey):
        return source
    if isinstance(source, (Ed25519PrivateKey, bytes, bytearray)):
        return Ed25519PublicKey.from_public_bytes(public_bytes(source))
    path = Path(source) if source is not None else default_public_path()
    if isinstance(source, str) and not path.is_file():
        return parse_public_key(source)
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        raise KeyFileError(f"no public key at {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"cannot read public key {path}: {exc}") from None
    try:
        return parse_public_key(text)
    except KeyFileError as exc:
        raise KeyFileError(f"{path}: {exc}") from None


# ---- signatures --------------------------------------------------------------------------------
def sign(key: Ed25519PrivateKey, data: bytes) -> bytes:
    """The 64-byte Ed25519 signature of `data`."""
    return key.sign(data)


def verify_signature(key: PublicKeyLike, data: bytes, signature: bytes) -> bool:
    """True when `signature` is `key`'s signature of exactly `data`."""
    public = load_public_key(key)
    try:
        public.verify(signature, data)
    except InvalidSignature:
        return False
    return True
