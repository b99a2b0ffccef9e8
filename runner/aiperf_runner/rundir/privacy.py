"""Private by default: what the runner writes into the published part of a run directory.

A bundle is downloadable by anyone, so the signed, hash-chained files of a run must not name the
site's hosts, users or directories. Masking therefore happens *when the runner writes an event*
(the signature and the hash chain then cover the masked text, and `verify` recomputes the same
score), never by editing a log afterwards:

- host names become pseudonyms `node-<12 hex>`: HMAC-SHA256 of the name under the site secret
  (`site_secret` beside the site key, made on first use), so the same node keeps its name within
  a run and across the site's runs, and nobody without the secret can test a guess;
- absolute paths lose everything up to the run directory or the data root (`<data>/...`); home
  directories become `~`; any other absolute path keeps its last component only (`.../name`);
- the raw names and paths go to `local/` in the run directory (`private.json`: the data root and
  the backend options that name accounts; `hostnames.json`: name -> pseudonym), which no bundle
  holds (`spec/bundle.py`).

`run --publish-hostnames` keeps host names as they are (for sites that want them on the list).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import socket
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from aiperf_runner.spec import keys
from aiperf_runner.spec.bundle import LOCAL_DIR

SECRET_NAME = "site_secret"
PRIVATE_FILE = "private.json"
HOSTNAMES_FILE = "hostnames.json"
PRIVATE_OPTIONS = ("account", "qos", "reservation", "extra_sbatch_args", "prologue", "wrap", "trial_python")
"""Backend options kept out of run.json (they name the site's accounts, files and images): in
local/private.json (the slurm backends record a masked form of the launcher in `system.slurm`)."""

_PATH_CHARS = r"[\w.+@%=,-]"
_ABS_PATH = re.compile(rf"(?<![\w:/.~>\]-])/{_PATH_CHARS}+(?:/{_PATH_CHARS}+)+/?")
_HOME_DIR = rf"(?:/home|/Users|/usr/home|/export/home)/{_PATH_CHARS}+|/root"
_HOME_START = re.compile(rf"^(?:{_HOME_DIR})(?=/|$)")
_HOME = re.compile(rf"(?<![\w:/.~-])(?:{_HOME_DIR})(?![\w.+@%=,-])")


def site_secret(directory: str | Path | None = None) -> bytes:
    """The site's pseudonym secret (32 random bytes, hex in `site_secret`, mode 0600), made on first use."""
    path = Path(directory) if directory is not None else keys.config_dir()
    path = path / SECRET_NAME
    try:
        return bytes.fromhex(path.read_text().strip())
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    value = secrets.token_hex(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it meanwhile: use theirs
        return bytes.fromhex(path.read_text().strip())
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")
    return bytes.fromhex(value)


def pseudonym(secret: bytes, host: str) -> str:
    """`node-` and 12 hex characters of HMAC-SHA256(secret, the lower-case short host name)."""
    short = host.strip().lower().split(".", 1)[0]
    return "node-" + hmac.new(secret, short.encode(), hashlib.sha256).hexdigest()[:12]


def this_host() -> set[str]:
    """Names this machine goes by (short and fully qualified)."""
    names = {socket.gethostname()}
    try:
        names.add(socket.getfqdn())
    except OSError:
        pass
    return {n for n in names if n and n != "localhost"}


class Masker:
    """Masks host names and paths in what the runner publishes.

    `names` maps raw host names to pseudonyms (what is known so far); with `secret`, new names are
    given pseudonyms as they appear (and recorded in `names`). `roots` maps absolute directories
    to what replaces them ("" for the run directory: paths become relative).
    """

    def __init__(self, names: Mapping[str, str] | None = None, secret: bytes | None = None,
                 roots: Mapping[str, str] | None = None, publish_hostnames: bool = False) -> None:
        self.names: dict[str, str] = dict(names or {})
        self.secret = secret
        self.publish_hostnames = publish_hostnames
        self.roots = {os.path.abspath(k).rstrip("/"): v for k, v in (roots or {}).items() if k}
        for prefix, label in ((sysconfig.get_paths().get("purelib"), "<site-packages>"),
                              (sys.prefix, "<python>"), (sys.base_prefix, "<python>")):
            if prefix and len(prefix) > 1:
                self.roots.setdefault(os.path.abspath(prefix), label)
        self._pattern: re.Pattern[str] | None = None

    def learn(self, hosts: Iterable[str]) -> None:
        for host in hosts:
            self.host(host)

    def host(self, name: str) -> str:
        """The name the run publishes for host `name`."""
        if self.publish_hostnames or not name or name == "localhost":
            return name
        if name not in self.names:
            if self.secret is None:
                return "node-?"  # unknown and no secret to name it: never the raw name
            self.names[name] = pseudonym(self.secret, name)
            self._pattern = None
        return self.names[name]

    def _hosts_pattern(self) -> re.Pattern[str] | None:
        if self._pattern is None and self.names:
            shorts = {n.split(".", 1)[0] for n in self.names} | set(self.names)
            alternatives = "|".join(re.escape(n) for n in sorted(shorts, key=len, reverse=True))
            # "slurmstepd-NAME" and "NAME.domain" are the host too; "NAME-01" is another host.
            self._pattern = re.compile(rf"(?<![\w.])(?:{alternatives})(?:\.[\w-]+)*(?![\w-])", re.IGNORECASE)
        return self._pattern

    def _short_map(self) -> dict[str, str]:
        out = {n.lower(): p for n, p in self.names.items()}
        out.update({n.split(".", 1)[0].lower(): p for n, p in self.names.items()})
        return out

    def _path(self, match: re.Match[str]) -> str:
        path = match.group(0)
        for root in sorted(self.roots, key=len, reverse=True):
            if path == root or path.startswith(root + "/"):
                rest = path[len(root):].lstrip("/")
                label = self.roots[root]
                return f"{label}/{rest}" if label and rest else (label or rest or ".")
        home = os.path.expanduser("~")
        if len(home) > 1 and (path == home or path.startswith(home + "/")):
            return "~" + path[len(home):]
        if _HOME_START.match(path):
            return _HOME_START.sub("~", path)
        last = path.rstrip("/").rsplit("/", 1)[-1]
        return f".../{last}"

    def text(self, text: str) -> str:
        """`text` with known host names, home directories and absolute paths masked."""
        if not text:
            return text
        out = _ABS_PATH.sub(self._path, text)
        out = _HOME.sub("~", out)
        pattern = None if self.publish_hostnames else self._hosts_pattern()
        if pattern is not None:
            shorts = self._short_map()
            out = pattern.sub(lambda m: shorts.get(m.group(0).split(".", 1)[0].lower(), "node-?"), out)
        return out

    def value(self, value: Any) -> Any:
        """A JSON value with every string in it masked."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value


# ---- local/: the raw names, never bundled -------------------------------------------------------
def local_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / LOCAL_DIR


def read_private(run_dir: str | Path) -> dict[str, Any]:
    """local/private.json of a run directory ({} when absent)."""
    try:
        data = json.loads((local_dir(run_dir) / PRIVATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_hostnames(run_dir: str | Path) -> dict[str, str]:
    """local/hostnames.json: raw host name -> pseudonym ({} when absent)."""
    try:
        data = json.loads((local_dir(run_dir) / HOSTNAMES_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def write_local(run_dir: str | Path, name: str, data: Any) -> None:
    """local/<name> as JSON (written whole: a crash leaves the old file or the new one)."""
    directory = local_dir(run_dir)
    directory.mkdir(mode=0o700, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, directory / name)


def write_private(run_dir: str | Path, data: Mapping[str, Any]) -> None:
    write_local(run_dir, PRIVATE_FILE, dict(data))


def write_hostnames(run_dir: str | Path, names: Mapping[str, str]) -> None:
    write_local(run_dir, HOSTNAMES_FILE, dict(names))


def split_config(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the config as run.json publishes it, what goes to local/private.json instead)."""
    public = dict(config)
    options = dict(public.get("backend_options") or {})
    private: dict[str, Any] = {"data": public.get("data"),
                               "backend_options": {k: options.pop(k) for k in PRIVATE_OPTIONS if k in options}}
    public["data"] = None
    if public.get("stage_data"):  # a node-local directory of the site: run.json data_source has it masked
        private["stage_data"] = public["stage_data"]
        public["stage_data"] = None
    public["backend_options"] = options
    return public, private


def merge_config(config: Mapping[str, Any], private: Mapping[str, Any]) -> dict[str, Any]:
    """run.json's config with local/private.json's values put back (for --resume)."""
    merged = dict(config)
    for key in ("data", "stage_data"):
        if private.get(key):
            merged[key] = private[key]
    merged["backend_options"] = {**(merged.get("backend_options") or {}), **(private.get("backend_options") or {})}
    return merged


def run_masker(run_dir: str | Path, *, secret: bytes | None = None, publish_hostnames: bool | None = None) -> Masker:
    """The masker of a run directory: its known host names, its run directory and data root."""
    private = read_private(run_dir)
    roots = {str(Path(run_dir).resolve()): "", os.path.abspath(run_dir): ""}
    if private.get("data"):
        roots[os.path.abspath(str(private["data"]))] = "<data>"
        roots[str(Path(str(private["data"])).resolve())] = "<data>"
    publish = bool(private.get("publish_hostnames")) if publish_hostnames is None else publish_hostnames
    masker = Masker(read_hostnames(run_dir), secret=secret, roots=roots, publish_hostnames=publish)
    return masker


def _secret_for(run_dir: str | Path, private: dict[str, Any]) -> bytes:
    """The site secret; where the config directory cannot hold one, a secret for this run alone
    (kept in local/private.json, so that a resumed run keeps its pseudonyms)."""
    try:
        return site_secret()
    except OSError:
        if not private.get("run_secret"):
            private["run_secret"] = secrets.token_hex(32)
        return bytes.fromhex(str(private["run_secret"]))


def start_run(run_dir: str | Path, config: Mapping[str, Any], hosts: Iterable[str]) -> tuple[Masker, dict[str, Any]]:
    """At a run's start: write local/ and return (the run's masker, the config run.json publishes)."""
    public, private = split_config(config)
    private["publish_hostnames"] = bool(config.get("publish_hostnames"))
    secret = _secret_for(run_dir, private)
    write_private(run_dir, private)
    masker = run_masker(run_dir, secret=secret)
    masker.learn([*hosts, *sorted(this_host())])
    write_hostnames(run_dir, masker.names)
    return masker, public


def resume_run(run_dir: str | Path, hosts: Iterable[str]) -> Masker:
    """At a resume: the run's masker (its names so far, new ones named with the same secret)."""
    private = read_private(run_dir)
    secret = _secret_for(run_dir, private)
    if private.get("run_secret"):
        write_private(run_dir, private)
    masker = run_masker(run_dir, secret=secret)
    known = len(masker.names)
    masker.learn([*hosts, *sorted(this_host())])
    if len(masker.names) != known:
        write_hostnames(run_dir, masker.names)
    return masker


def mask_event(masker: Masker, run_dir: str | Path, kind: str, fields: dict[str, Any]) -> dict[str, Any]:
    """An event's fields as the log records them: node names as pseudonyms, error texts masked."""
    out = dict(fields)
    # trial_started's nodes, and those an ending attempt names when it ran elsewhere (run/controller.py).
    if kind in ("trial_started", "trial_finished", "trial_failed") and isinstance(out.get("nodes"), list):
        known = len(masker.names)
        out["nodes"] = [masker.host(str(n)) for n in out["nodes"]]
        if len(masker.names) != known:
            write_hostnames(run_dir, masker.names)
    if kind == "slot_lost" and isinstance(out.get("node"), str):  # a node the run stopped using
        known = len(masker.names)
        out["node"] = masker.host(out["node"])
        if len(masker.names) != known:
            write_hostnames(run_dir, masker.names)
    for key in ("error", "reason"):
        if isinstance(out.get(key), str):
            out[key] = masker.text(out[key])
    return out
