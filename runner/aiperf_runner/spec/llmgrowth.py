"""AIPerf-LLM's growths as the log records them, and an architecture's hash: what a growth does to an
architecture (no weights: torch-free), so that the search proposes, the trial program replays and the verifier
checks the same thing. A growth is a plain dict, one per function of train/llm/morph.py:
{"kind": "insert_block", "index": i, "layer": {heads, head_dim, mlp_hidden}} (a block before block i),
{"kind": "widen_mlp", "layer": i, "new_hidden": h} (h above the block's width), or
{"kind": "add_heads", "layer": i, "n": n} (n >= 1 heads of the block's head_dim).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from .llmflops import LlmArch, LlmArchError, LlmLayer

GROWTH_KINDS = ("insert_block", "widen_mlp", "add_heads")
_GROWTH_KEYS = {"insert_block": {"kind", "index", "layer"}, "widen_mlp": {"kind", "layer", "new_hidden"},
                "add_heads": {"kind", "layer", "n"}}


def llm_arch_hash(arch: LlmArch) -> str:
    """sha256 (hex) of the canonical JSON of `arch.to_dict()`: sorted keys, compact separators."""
    text = json.dumps(arch.to_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _int_field(growth: Mapping[str, Any], name: str) -> int:
    value = growth[name]
    # bool is an int subclass: True would pass as 1 and hide a mistake in a logged growth
    if isinstance(value, bool) or not isinstance(value, int):
        raise LlmArchError(f"growth {growth.get('kind')}: {name} must be an integer, got {value!r}")
    return value


def _layer_index(arch: LlmArch, growth: Mapping[str, Any]) -> int:
    i = _int_field(growth, "layer")
    if not 0 <= i < len(arch.layers):
        raise LlmArchError(f"growth {growth['kind']}: layer {i} outside 0..{len(arch.layers) - 1}")
    return i


def apply_growth(arch: LlmArch, growth: Mapping[str, Any]) -> LlmArch:
    """The architecture after one growth (the forms: the module docstring); LlmArchError when the
    growth is malformed or does not apply to `arch`."""
    if not isinstance(growth, Mapping):
        raise LlmArchError(f"growth: expected an object, got {type(growth).__name__}")
    kind = growth.get("kind")
    if kind not in _GROWTH_KEYS:
        raise LlmArchError(f"growth: unknown kind {kind!r} (expected one of {', '.join(GROWTH_KINDS)})")
    keys = set(growth)
    if keys != _GROWTH_KEYS[kind]:
        raise LlmArchError(f"growth {kind}: expected fields {sorted(_GROWTH_KEYS[kind])}, got {sorted(keys)}")
    if kind == "insert_block":
        index = _int_field(growth, "index")
        # with_inserted checks the index; d_model is the architecture's, so the new block keeps it
        return arch.with_inserted(index, LlmLayer.from_dict(growth["layer"], f"growth {kind}: layer"))
    i = _layer_index(arch, growth)
    old = arch.layers[i]
    if kind == "widen_mlp":
        new_hidden = _int_field(growth, "new_hidden")
        if new_hidden <= old.mlp_hidden:
            raise LlmArchError(f"growth widen_mlp: new_hidden {new_hidden} must exceed mlp_hidden {old.mlp_hidden}"
                               f" of layer {i}")
        return arch.with_layer(i, LlmLayer(old.heads, old.head_dim, new_hidden))
    n = _int_field(growth, "n")
    if n < 1:
        raise LlmArchError(f"growth add_heads: n must be at least 1, got {n}")
    return arch.with_layer(i, LlmLayer(old.heads + n, old.head_dim, old.mlp_hidden))


def replay(arch: LlmArch, growths: Iterable[Mapping[str, Any]]) -> LlmArch:
    """`arch` after every growth of `growths`, in order."""
    for g in growths:
        arch = apply_growth(arch, g)
    return arch
