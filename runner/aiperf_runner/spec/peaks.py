"""Peak FLOP/s per precision of known accelerators, and a conservative CPU estimate.

Figures are the vendors' **dense** (non-sparse) peak numbers per device, in FLOP/s, for the four
precisions a run may declare: ``fp32`` (plain FP32 on the vector/CUDA cores, or the FP32 matrix
rate where the vendor publishes one), ``tf32`` (TF32 tensor/matrix cores), ``bf16`` and ``fp16``
(tensor/matrix cores with FP32 accumulate, what ``torch.autocast`` uses).

Where a device has no unit for a precision (V100 has no TF32 or BF16 tensor cores; MI250X has no
TF32), the precision runs at the FP32 rate and the table says so: PyTorch silently falls back.

The plausibility check uses these figures as **upper bounds**, so where a figure varies between
variants of a product the higher one is taken and the source is named in `note`.

Lookup is by model name as the runner records it (``torch.cuda.get_device_name()`` style, e.g.
``"NVIDIA H100 80GB HBM3"``, ``"NVIDIA A100-SXM4-40GB"``, ``"AMD Instinct MI300X"``): the first
entry of `ACCELERATORS` whose pattern matches, case-insensitively, wins (specific entries first).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")

T = 1e12


@dataclass(frozen=True)
class Accelerator:
    key: str
    name: str
    vendor: str
    pattern: str  # regular expression matched (case-insensitively) against the model name
    peak: Mapping[str, float]  # precision -> dense peak FLOP/s per device
    note: str = ""
    fallback: tuple[str, ...] = field(default=())  # precisions served at the fp32 rate

    def peak_flops(self, precision: str) -> float:
        return float(self.peak[_norm_precision(precision)])


def _entry(key: str, name: str, vendor: str, pattern: str, fp32: float, tf32: float | None,
           bf16: float | None, fp16: float, note: str = "") -> Accelerator:
    fallback = tuple(p for p, v in (("tf32", tf32), ("bf16", bf16)) if v is None)
    peak = {"fp32": fp32 * T, "tf32": (tf32 if tf32 is not None else fp32) * T,
            "bf16": (bf16 if bf16 is not None else fp32) * T, "fp16": fp16 * T}
    return Accelerator(key, name, vendor, pattern, peak, note, fallback)


# Order matters: more specific patterns first (H100 PCIe / NVL before plain H100 = SXM).
ACCELERATORS: tuple[Accelerator, ...] = (
    _entry("h200-nvl", "NVIDIA H200 NVL", "NVIDIA", r"\bh200\b.*\bnvl\b", 60, 417.5, 835.5, 835.5,
           "H200 NVL datasheet (TF32 835, BF16/FP16 1671 TFLOPS with sparsity; halved)"),
    _entry("h200", "NVIDIA H200 SXM", "NVIDIA", r"\bh200\b", 67, 494.7, 989.4, 989.4,
           "H200 SXM datasheet (TF32 989, BF16/FP16 1979 TFLOPS with sparsity; halved)"),
    _entry("h100-pcie", "NVIDIA H100 PCIe", "NVIDIA", r"\bh100\b.*\bpci-?e\b", 51, 378, 756.5, 756.5,
           "H100 PCIe datasheet (TF32 756, BF16/FP16 1513 TFLOPS with sparsity; halved)"),
    _entry("h100-nvl", "NVIDIA H100 NVL", "NVIDIA", r"\bh100\b.*\bnvl\b", 60, 417.5, 835.5, 835.5,
           "H100 NVL datasheet, per GPU (TF32 835, BF16/FP16 1671 TFLOPS with sparsity; halved)"),
    _entry("h100-sxm", "NVIDIA H100 SXM", "NVIDIA", r"\bh100\b", 67, 494.7, 989.4, 989.4,
           "H100 SXM5 datasheet (TF32 989, BF16/FP16 1979 TFLOPS with sparsity; halved)"),
    _entry("a100-80gb", "NVIDIA A100 80GB", "NVIDIA", r"\ba100\b.*\b80\s*gb\b", 19.5, 156, 312, 312,
           "A100 datasheet (SXM4 and PCIe share these peaks)"),
    _entry("a100-40gb", "NVIDIA A100 40GB", "NVIDIA", r"\ba100\b", 19.5, 156, 312, 312,
           "A100 datasheet (SXM4 and PCIe share these peaks)"),
    _entry("v100s", "NVIDIA V100S PCIe", "NVIDIA", r"\bv100s\b", 16.4, None, None, 130,
           "V100S datasheet; no TF32/BF16 units: those run at the FP32 rate"),
    _entry("v100-pcie", "NVIDIA V100 PCIe", "NVIDIA", r"\bv100\b.*\bpci-?e\b", 14, None, None, 112,
           "V100 PCIe datasheet; no TF32/BF16 units: those run at the FP32 rate"),
    _entry("v100", "NVIDIA V100 SXM2", "NVIDIA", r"\bv100\b", 15.7, None, None, 125,
           "V100 SXM2 datasheet; no TF32/BF16 units: those run at the FP32 rate"),
    _entry("a10", "NVIDIA A10", "NVIDIA", r"\ba10\b", 31.2, 62.5, 125, 125,
           "A10 datasheet (TF32 125, BF16/FP16 250 TFLOPS with sparsity; halved)"),
    _entry("l40s", "NVIDIA L40S", "NVIDIA", r"\bl40s\b", 91.6, 183, 362.05, 362.05,
           "L40S datasheet (TF32 366, BF16/FP16 733 TFLOPS with sparsity; halved)"),
    _entry("rtx-4090", "NVIDIA GeForce RTX 4090", "NVIDIA", r"\brtx\s*4090\b", 82.6, 82.6, 165.2, 165.2,
           "Ada whitepaper: FP16/BF16 tensor with FP32 accumulate (what autocast uses)"),
    _entry("mi300x", "AMD Instinct MI300X", "AMD", r"\bmi300x\b", 163.4, 653.7, 1307.4, 1307.4,
           "MI300X datasheet, dense matrix peaks"),
    _entry("mi250x", "AMD Instinct MI250X", "AMD", r"\bmi250x?\b", 95.7, None, 383, 383,
           "MI250X datasheet (FP32 matrix 95.7); no TF32: runs at the FP32 matrix rate"),
    _entry("ascend-910b", "Huawei Ascend 910B", "Huawei", r"\bascend\s*-?\s*910\s*b", 94, None, 376, 376,
           "no per-precision datasheet is published; FP16/BF16 376 TFLOPS as widely reported for "
           "the fastest 910B variant, FP32 taken as a quarter of that; no TF32"),
)

_COMPILED = tuple((re.compile(a.pattern, re.IGNORECASE), a) for a in ACCELERATORS)


def _norm_precision(precision: str) -> str:
    p = str(precision).lower()
    if p not in PRECISIONS:
        raise KeyError(f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})")
    return p


def lookup(model: str | None) -> Accelerator | None:
    """The table entry for an accelerator model name, or None if unknown."""
    if not model:
        return None
    text = str(model).replace("_", " ")
    for rx, acc in _COMPILED:
        if rx.search(text):
            return acc
    return None


def accelerator_peak(model: str | None, precision: str, count: int = 1) -> float | None:
    """Dense peak FLOP/s of `count` devices of `model` at `precision`; None if the model is unknown."""
    acc = lookup(model)
    if acc is None:
        return None
    return acc.peak_flops(precision) * max(int(count), 0)


# ---- CPUs ----------------------------------------------------------------------------------------

CPU_DEFAULT_GHZ = 3.5
"""Clock assumed when the model name carries none: high on purpose (the estimate is an upper bound)."""

CPU_FLOP_PER_CYCLE = {"fp32": 64, "tf32": 64, "bf16": 128, "fp16": 128}
"""Per core per cycle: two 512-bit FMA units x 16 FP32 lanes x 2 = 64 FP32; half-precision
dot-product instructions (AVX512-BF16 / AVX512-FP16) double it. AMX tiles can go higher: pass
`flop_per_cycle` for such machines."""

_GHZ = re.compile(r"(\d+(?:\.\d+)?)\s*ghz", re.IGNORECASE)


def cpu_ghz(model: str | None) -> float:
    """The clock in the model string (``"... @ 2.30GHz"``), else `CPU_DEFAULT_GHZ`."""
    if model:
        found = _GHZ.findall(str(model))
        if found:
            return float(found[-1])
    return CPU_DEFAULT_GHZ


def cpu_peak(cores: int, ghz: float | None = None, precision: str = "fp32", *,
             model: str | None = None, flop_per_cycle: float | None = None) -> float:
    """Conservative (high) CPU estimate: cores x GHz x FLOP/cycle, in FLOP/s."""
    p = _norm_precision(precision)
    clock = float(ghz) if ghz else cpu_ghz(model)
    per_cycle = float(flop_per_cycle) if flop_per_cycle else CPU_FLOP_PER_CYCLE[p]
    return max(int(cores), 1) * clock * 1e9 * per_cycle


def system_peak(system: Mapping[str, object], precision: str) -> tuple[float | None, str]:
    """Peak FLOP/s of a run.json `system` block at `precision` from this table, and how it was found.

    Accelerators of a known model: table peak x count. No accelerators: the CPU estimate.
    Unknown accelerator model: (None, reason).
    """
    count = int(system.get("accelerator_count") or 0)  # type: ignore[call-overload]
    model = system.get("accelerator_model")
    if count > 0 and model and str(model).lower() != "cpu":
        acc = lookup(str(model))
        if acc is None:
            return None, f"accelerator {model!r} is not in the peak table"
        return acc.peak_flops(precision) * count, f"{count} x {acc.name} ({acc.note})"
    cores = int(system.get("cpu_cores") or 1)  # type: ignore[call-overload]
    cpu_model = system.get("cpu_model")
    value = cpu_peak(cores, precision=precision, model=str(cpu_model) if cpu_model else None)
    return value, (f"CPU estimate: {cores} cores x {cpu_ghz(str(cpu_model) if cpu_model else None)} GHz x "
                   f"{CPU_FLOP_PER_CYCLE[_norm_precision(precision)]} FLOP/cycle")
