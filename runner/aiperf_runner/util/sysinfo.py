"""System facts for run.json, collected automatically, and the declared peak FLOP/s.

No host names, user names or absolute paths are recorded: only what describes the hardware and
the software stack.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiperf_runner.spec import peaks


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def host_facts() -> dict[str, Any]:
    """This machine's CPU model, cores and memory (defaults for `aiperf-runner system add`)."""
    return {"cpu_model": cpu_model(), "cpu_cores": cpu_cores(), "memory_bytes": memory_bytes() or 0}


def _nvidia_present() -> bool:
    return Path("/dev/nvidia0").exists() or Path("/proc/driver/nvidia").exists()


def torch_facts() -> dict[str, Any]:
    """torch and CUDA versions and the visible accelerators (none without torch or a GPU).

    torch is imported only where a GPU driver is present: on a CPU-only machine its version comes
    from the package metadata, which keeps the controller's start quick.
    """
    if not _nvidia_present():
        try:
            version: str | None = importlib.metadata.version("torch").split("+")[0]
        except importlib.metadata.PackageNotFoundError:
            version = None
        return {"torch": version, "cuda": None, "accelerators": []}
    try:
        import torch
    except ImportError:
        return {"torch": None, "cuda": None, "accelerators": []}
    accelerators = []
    try:
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                accelerators.append({"model": props.name, "memory_bytes": int(props.total_memory)})
    except Exception:  # noqa: BLE001 - a broken driver: report no accelerator
        accelerators = []
    return {"torch": torch.__version__.split("+")[0], "cuda": torch.version.cuda if accelerators else None,
            "accelerators": accelerators}


def collect(slots: int, devices_per_slot: int, device_type: str, backend_facts: Mapping[str, Any] | None = None
            ) -> dict[str, Any]:
    """The `system` block of run.json.

    Accelerators are those the run uses (slots x devices per slot) when it trains on CUDA; a CPU run
    records `accelerator_model` "cpu" and count 0, and its peak is the CPU estimate of spec/peaks.py.
    """
    facts = torch_facts()
    visible = facts.pop("accelerators")
    used = slots * devices_per_slot if device_type == "cuda" else 0
    accelerators = visible[:used] if used else []
    system: dict[str, Any] = {
        "nodes": 1,
        "cpu_model": cpu_model(),
        "cpu_cores": cpu_cores(),
        "memory_bytes": memory_bytes(),
        "os": platform.system(),
        "python": platform.python_version(),
        **facts,
        "accelerators": accelerators,
        "accelerator_model": accelerators[0]["model"] if accelerators else "cpu",
        "accelerator_count": len(accelerators),
        "device_type": device_type,
    }
    system.update(backend_facts or {})
    return system


def declared_peaks(system: Mapping[str, Any], overrides: Mapping[str, float] | None = None
                   ) -> tuple[dict[str, float | None], dict[str, str]]:
    """Peak FLOP/s per precision from spec/peaks.py for the recorded system, then the operator's overrides.

    Returns (peaks, source per precision).
    """
    values: dict[str, float | None] = {}
    sources: dict[str, str] = {}
    for precision in peaks.PRECISIONS:
        value, how = peaks.system_peak(system, precision)
        values[precision], sources[precision] = value, how
    for precision, value in (overrides or {}).items():
        if precision not in peaks.PRECISIONS:
            raise ValueError(f"--peak-flops: unknown precision {precision!r} (known: {', '.join(peaks.PRECISIONS)})")
        values[precision], sources[precision] = float(value), "declared by the operator"
    return values, sources


def parse_peak_overrides(items: list[str] | None) -> dict[str, float]:
    """["fp32=1.2e12", ...] -> {"fp32": 1.2e12}."""
    out: dict[str, float] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--peak-flops {item!r}: expected PRECISION=FLOPS, e.g. fp32=1.9e13")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"--peak-flops {item!r}: {value!r} is not a number") from None
        if not number > 0:
            raise ValueError(f"--peak-flops {item!r}: must be positive")
        out[key.strip().lower()] = number
    return out
