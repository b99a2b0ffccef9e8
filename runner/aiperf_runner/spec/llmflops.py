"""Analytic FLOPs of AIPerf-LLM's decoder-only transformer (torch-free): the architecture and its rules.

`LlmArch` describes the network that `train.llm.model.build_model` builds:

- a token embedding (`vocab` x `d_model`, a lookup), then one block per entry of `layers`;
- each block, pre-norm: x + Attn(RMSNorm(x)), then x + MLP(RMSNorm(x)); no biases anywhere;
- attention of a layer: `heads` heads of `head_dim` features each, rotary positions on queries and keys,
  causal; it projects d_model -> heads*head_dim (Q, K, V) and back (output); heads*head_dim need not
  equal d_model;
- the MLP is a SwiGLU: down(silu(gate(x)) * up(x)), three d_model x `mlp_hidden` matrices;
- a final RMSNorm and an *untied* output head (d_model x vocab: its own weights, not the embedding's;
  a tied head would make the embedding a matmul weight too and blur "non-embedding parameters").

`forward_flops_per_sequence(arch, tokens=T)`, `train_flops_per_token(arch)`, `train_flops(arch, lengths)`.

Rules `llm-v1` (docs/score.md, "AIPerf-LLM: FLOPs of a decoder-only transformer"): matrix multiplies
only, 2 FLOP per multiply-add; the norms, softmax, rotary rotations, SiLU, the gating product, the
residual additions, the embedding lookup and the loss are not matrix multiplies and count 0. Attention
products are counted causally: a query attends to itself and the positions before it, so a sequence of
T tokens has T(T+1)/2 query-key pairs per head, not T^2 (the dense figure is given too: it is what
`torch.utils.flop_counter.FlopCounterMode` counts, as it knows nothing of the mask). Training = 3 x
forward: the backward pass of every matmul is two matmuls of the same size (the gradient of its input
and of its weight; every matmul's input needs a gradient, as the embedding below them all is trained).
Tokens are counted where they are real: padding is not trained work, and with causal attention the real
tokens of a right-padded sequence compute exactly what an unpadded sequence of their length computes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .errors import AiperfError

LLM_RULES = ("llm-v1",)
"""The LLM FLOP rules, the default first. A new formula gets a new name; old runs keep theirs."""
DEFAULT_LLM_RULES = "llm-v1"


class LlmArchError(AiperfError, ValueError):
    """An invalid LLM architecture; the message names the offending field or layer."""


def _positive_int(value: Any, what: str) -> int:
    # bool is an int subclass: True would pass as 1 and hide a mistake in hand-written JSON
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LlmArchError(f"{what} must be a positive integer, got {value!r}")
    return value


def _check_layer(d: Mapping[str, Any], where: str) -> None:
    for name in ("heads", "head_dim", "mlp_hidden"):
        _positive_int(d[name], f"{where}: {name}")
    if d["head_dim"] % 2:  # rotary positions rotate pairs of features
        raise LlmArchError(f"{where}: head_dim must be even (rotary positions), got {d['head_dim']}")


@dataclass(frozen=True)
class LlmLayer:
    """One block: `heads` attention heads of `head_dim` features; a SwiGLU MLP of `mlp_hidden` units."""

    heads: int
    head_dim: int
    mlp_hidden: int

    def __post_init__(self) -> None:
        self.validate()

    @property
    def attn_dim(self) -> int:
        """Width of Q, K and V (heads x head_dim): what attention projects d_model to and back from."""
        return self.heads * self.head_dim

    def validate(self, where: str = "layer") -> None:
        _check_layer(self.to_dict(), where)

    def to_dict(self) -> dict[str, int]:
        return {"heads": self.heads, "head_dim": self.head_dim, "mlp_hidden": self.mlp_hidden}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "layer") -> LlmLayer:
        if not isinstance(d, Mapping):
            raise LlmArchError(f"{where}: expected an object, got {type(d).__name__}")
        unknown = set(d) - {"heads", "head_dim", "mlp_hidden"}
        if unknown:
            raise LlmArchError(f"{where}: unknown fields {sorted(unknown)}")
        missing = {"heads", "head_dim", "mlp_hidden"} - set(d)
        if missing:
            raise LlmArchError(f"{where}: missing fields {sorted(missing)}")
        _check_layer(d, where)
        return cls(d["heads"], d["head_dim"], d["mlp_hidden"])


@dataclass(frozen=True)
class LlmArch:
    """A decoder-only transformer (see the module docstring). `seq_len` is the training context length."""

    vocab: int
    d_model: int
    seq_len: int
    layers: tuple[LlmLayer, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))  # a list given by a caller stays hashable
        self.validate()

    def validate(self) -> None:
        for name in ("vocab", "d_model", "seq_len"):
            _positive_int(getattr(self, name), name)
        if not self.layers:
            raise LlmArchError("layers: at least one block is required")
        for i, layer in enumerate(self.layers):
            if not isinstance(layer, LlmLayer):
                raise LlmArchError(f"layer {i}: expected an LlmLayer, got {type(layer).__name__}")
            layer.validate(f"layer {i}")

    def to_dict(self) -> dict[str, Any]:
        return {"vocab": self.vocab, "d_model": self.d_model, "seq_len": self.seq_len,
                "layers": [x.to_dict() for x in self.layers]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LlmArch:
        if not isinstance(d, Mapping):
            raise LlmArchError(f"architecture: expected an object, got {type(d).__name__}")
        unknown = set(d) - {"vocab", "d_model", "seq_len", "layers"}
        if unknown:
            raise LlmArchError(f"architecture: unknown fields {sorted(unknown)}")
        try:
            layers = d["layers"]
            if not isinstance(layers, list | tuple):
                raise LlmArchError(f"layers: expected a list, got {type(layers).__name__}")
            return cls(d["vocab"], d["d_model"], d["seq_len"],
                       tuple(LlmLayer.from_dict(x, f"layer {i}") for i, x in enumerate(layers)))
        except KeyError as e:
            raise LlmArchError(f"architecture: missing field {e.args[0]!r}") from None

    def with_layer(self, index: int, layer: LlmLayer) -> LlmArch:
        """This architecture with block `index` replaced by `layer`."""
        layers = list(self.layers)
        layers[index] = layer
        return replace(self, layers=tuple(layers))

    def with_inserted(self, index: int, layer: LlmLayer) -> LlmArch:
        """This architecture with `layer` inserted before block `index` (index == len(layers): appended)."""
        if not 0 <= index <= len(self.layers):
            raise LlmArchError(f"insert index {index} outside 0..{len(self.layers)}")
        return replace(self, layers=(*self.layers[:index], layer, *self.layers[index:]))


# ---- parameters -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class LlmParams:
    """Parameter counts. `non_embedding` (PaLM's N) is everything but the token embedding table."""

    embedding: int   # vocab x d_model (a lookup)
    matmul: int      # the blocks' Q, K, V, output and MLP matrices, and the output head
    norms: int       # RMSNorm gains: two per block and the final one, d_model each

    @property
    def non_embedding(self) -> int:
        return self.matmul + self.norms

    @property
    def total(self) -> int:
        return self.embedding + self.non_embedding


def param_counts(arch: LlmArch) -> LlmParams:
    """The parameters `build_model(arch)` holds, by kind (the torch model's count is tested against it)."""
    d = arch.d_model
    blocks = sum(4 * d * x.attn_dim + 3 * d * x.mlp_hidden for x in arch.layers)
    return LlmParams(embedding=arch.vocab * d, matmul=blocks + d * arch.vocab,
                     norms=(2 * len(arch.layers) + 1) * d)


# ---- forward FLOPs --------------------------------------------------------------------------------

def causal_pairs(tokens: int) -> int:
    """Query-key pairs of causal attention over `tokens` positions: each attends to itself and those before."""
    return tokens * (tokens + 1) // 2


@dataclass(frozen=True)
class BlockFlops:
    """Forward FLOPs of one block over one sequence. `attn_scores` is QK^T, `attn_values` is AV,
    both causal; the `*_dense` fields count all T^2 query-key pairs (as FlopCounterMode does)."""

    index: int
    qkv: int
    attn_out: int
    attn_scores: int
    attn_values: int
    attn_scores_dense: int
    attn_values_dense: int
    mlp: int

    @property
    def total(self) -> int:
        return self.qkv + self.attn_out + self.attn_scores + self.attn_values + self.mlp

    @property
    def total_dense(self) -> int:
        return self.qkv + self.attn_out + self.attn_scores_dense + self.attn_values_dense + self.mlp

    def to_json(self) -> dict[str, int]:
        return {"index": self.index, "qkv": self.qkv, "attn_out": self.attn_out,
                "attn_scores": self.attn_scores, "attn_values": self.attn_values,
                "attn_scores_dense": self.attn_scores_dense, "attn_values_dense": self.attn_values_dense,
                "mlp": self.mlp}


@dataclass(frozen=True)
class SequenceFlops:
    """Forward FLOPs of one sequence of `tokens` real tokens: `causal` (the rules' figure) and `dense`."""

    tokens: int
    causal: int
    dense: int
    head: int
    rules: str = DEFAULT_LLM_RULES
    per_layer: tuple[BlockFlops, ...] = field(default=(), compare=False)

    def to_json(self, per_layer: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"rules": self.rules, "tokens": self.tokens, "forward_flops": self.causal,
                               "forward_flops_dense": self.dense, "head_flops": self.head}
        if per_layer:
            out["per_layer"] = [x.to_json() for x in self.per_layer]
        return out


def _check_rules(rules: str) -> None:
    if rules not in LLM_RULES:
        raise ValueError(f"unknown LLM FLOP rules {rules!r} (expected one of {', '.join(LLM_RULES)})")


def block_flops(arch: LlmArch, index: int, tokens: int) -> BlockFlops:
    """Forward FLOPs of block `index` over a sequence of `tokens` tokens (T below).

    Q, K, V: three (T x d_model) @ (d_model x A) products, A = heads*head_dim: 3 * 2*T*d*A.
    Output projection: (T x A) @ (A x d_model): 2*T*A*d.
    QK^T: per head, a head_dim-long dot product per query-key pair: causal 2*head_dim*heads*T(T+1)/2,
    dense 2*A*T^2. AV: per head and pair, a weight times a head_dim-vector, the same count.
    SwiGLU MLP: gate and up (d_model -> hidden) and down (hidden -> d_model): 3 * 2*T*d*hidden.
    """
    layer = arch.layers[index]
    d, a, t = arch.d_model, layer.attn_dim, tokens
    return BlockFlops(index=index, qkv=3 * 2 * t * d * a, attn_out=2 * t * a * d,
                      attn_scores=2 * a * causal_pairs(t), attn_values=2 * a * causal_pairs(t),
                      attn_scores_dense=2 * a * t * t, attn_values_dense=2 * a * t * t,
                      mlp=3 * 2 * t * d * layer.mlp_hidden)


def forward_flops_per_sequence(arch: LlmArch, tokens: int | None = None,
                               rules: str = DEFAULT_LLM_RULES) -> SequenceFlops:
    """Forward FLOPs of one sequence of `tokens` real tokens (default: a full `seq_len`).

    The blocks (`block_flops`) plus the output head, 2*T*d_model*vocab (logits at every position, as a
    language model trains on every next token). Right padding to `seq_len` adds nothing: it is not counted.
    """
    _check_rules(rules)
    t = arch.seq_len if tokens is None else tokens
    if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= arch.seq_len:
        raise ValueError(f"tokens must be an integer in 1..seq_len ({arch.seq_len}), got {t!r}")
    blocks = tuple(block_flops(arch, i, t) for i in range(len(arch.layers)))
    head = 2 * t * arch.d_model * arch.vocab
    return SequenceFlops(tokens=t, causal=sum(b.total for b in blocks) + head,
                         dense=sum(b.total_dense for b in blocks) + head, head=head, rules=rules,
                         per_layer=blocks)


# ---- training FLOPs -------------------------------------------------------------------------------

TRAIN_FACTOR = 3
"""Training = forward + backward = 3 x forward (the backward of each matmul is two matmuls of its size)."""


@dataclass(frozen=True)
class TokenFlops:
    """Per-token FLOPs averaged over a full sequence of `seq_len` tokens.

    `train` (= 3 x `forward`) is the rules' figure, the one a score counts. `palm` is PaLM's
    6N + 12*L*H*Q*T (Chowdhery et al. 2022, appendix B), logged beside it for readers; it differs by
    `palm - train = 6*norm_params + 6*(T - 1)*sum(A_l)` exactly: PaLM's N includes the RMSNorm gains
    (elementwise, not matmuls), and its attention term lets every query meet all T keys where causal
    attention meets (T+1)/2 on average. For long contexts the attention term of `palm` is about twice ours.
    """

    forward: int
    train: int
    palm: int
    non_embedding_params: int
    seq_len: int
    rules: str = DEFAULT_LLM_RULES

    def to_json(self) -> dict[str, Any]:
        return {"rules": self.rules, "seq_len": self.seq_len, "forward_flops_per_token": self.forward,
                "train_flops_per_token": self.train, "palm_flops_per_token": self.palm,
                "non_embedding_params": self.non_embedding_params}


def palm_flops_per_token(arch: LlmArch) -> int:
    """PaLM's training FLOPs per token, 6N + 12*L*H*Q*T, with per-layer H*Q summed: 6N + 12*T*sum(A_l).

    N = non-embedding parameters (`LlmParams.non_embedding`: the untied head included, the embedding table
    not), T = seq_len. 6N: 2 FLOP per parameter per token forward, 3x for training; 12*T*A per layer:
    QK^T and AV, 2*A*T each per token forward (dense), 3x for training.
    """
    n = param_counts(arch).non_embedding
    return 6 * n + 12 * arch.seq_len * sum(x.attn_dim for x in arch.layers)


def train_flops_per_token(arch: LlmArch, rules: str = DEFAULT_LLM_RULES) -> TokenFlops:
    """Training FLOPs per token over a full sequence: 3 x forward_flops_per_sequence(arch).causal / seq_len.

    The division is exact: the matmul terms are per token already, and causal attention's
    2 * 2*A*T(T+1)/2 per sequence is 2*A*(T+1) per token.
    """
    seq = forward_flops_per_sequence(arch, rules=rules)
    forward, rest = divmod(seq.causal, arch.seq_len)
    assert rest == 0, "causal forward FLOPs of a full sequence are a multiple of seq_len"
    return TokenFlops(forward=forward, train=TRAIN_FACTOR * forward, palm=palm_flops_per_token(arch),
                      non_embedding_params=param_counts(arch).non_embedding, seq_len=arch.seq_len, rules=rules)


def train_flops(arch: LlmArch, lengths: Iterable[int], rules: str = DEFAULT_LLM_RULES) -> int:
    """Training FLOPs of a batch whose sequences hold `lengths` real tokens each (padding not counted)."""
    cache: dict[int, int] = {}
    total = 0
    for t in lengths:
        if t == 0:  # a sequence of padding only
            continue
        if t not in cache:
            cache[t] = forward_flops_per_sequence(arch, tokens=t, rules=rules).causal
        total += cache[t]
    return TRAIN_FACTOR * total
