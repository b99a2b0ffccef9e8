"""Peak FLOP/s table lookups and the CPU estimate."""

from __future__ import annotations

import pytest
from aiperf_runner.spec import peaks

T = 1e12


@pytest.mark.parametrize(("name", "key"), [
    ("NVIDIA H200", "h200"),
    ("NVIDIA H200 NVL", "h200-nvl"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 SXM5 80GB", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H100 NVL", "h100-nvl"),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    ("NVIDIA A100 80GB PCIe", "a100-80gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
    ("Tesla V100-SXM2-32GB", "v100"),
    ("Tesla V100-PCIE-16GB", "v100-pcie"),
    ("Tesla V100S-PCIE-32GB", "v100s"),
    ("NVIDIA A10", "a10"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("AMD Instinct MI300X", "mi300x"),
    ("AMD Instinct MI250X", "mi250x"),
    ("Ascend910B3", "ascend-910b"),
    ("Huawei Ascend 910B", "ascend-910b"),
])
def test_lookup(name: str, key: str) -> None:
    acc = peaks.lookup(name)
    assert acc is not None and acc.key == key


@pytest.mark.parametrize("name", ["NVIDIA A10G", "NVIDIA GeForce RTX 3090", "cpu", "", None, "NVIDIA A1000"])
def test_unknown(name: str | None) -> None:
    assert peaks.lookup(name) is None


def test_dense_vendor_figures() -> None:
    h100 = peaks.lookup("NVIDIA H100 80GB HBM3")
    assert h100 is not None
    assert h100.peak_flops("fp32") == 67 * T
    assert h100.peak_flops("tf32") == 494.7 * T     # 989 with sparsity
    assert h100.peak_flops("bf16") == 989.4 * T     # 1979 with sparsity
    a100 = peaks.lookup("NVIDIA A100-SXM4-80GB")
    assert a100 is not None and a100.peak_flops("tf32") == 156 * T and a100.peak_flops("fp16") == 312 * T
    mi300x = peaks.lookup("AMD Instinct MI300X")
    assert mi300x is not None and mi300x.peak_flops("bf16") == 1307.4 * T


def test_missing_units_run_at_the_fp32_rate() -> None:
    v100 = peaks.lookup("Tesla V100-SXM2-32GB")
    assert v100 is not None
    assert v100.peak_flops("tf32") == v100.peak_flops("fp32") == 15.7 * T
    assert v100.peak_flops("bf16") == 15.7 * T and v100.peak_flops("fp16") == 125 * T
    assert set(v100.fallback) == {"tf32", "bf16"}


def test_every_entry_has_every_precision() -> None:
    for acc in peaks.ACCELERATORS:
        for p in peaks.PRECISIONS:
            assert acc.peak_flops(p) > 0
        # tensor-core rates are never below the plain fp32 rate
        assert acc.peak_flops("fp16") >= acc.peak_flops("fp32")


def test_accelerator_peak_scales_with_count() -> None:
    assert peaks.accelerator_peak("NVIDIA H100 PCIe", "bf16", 8) == 8 * 756.5 * T
    assert peaks.accelerator_peak("unknown thing", "bf16", 8) is None
    with pytest.raises(KeyError):
        peaks.accelerator_peak("NVIDIA H100 PCIe", "int8", 1)


def test_cpu_estimate() -> None:
    assert peaks.cpu_peak(16, 2.5, "fp32") == 16 * 2.5e9 * 64
    assert peaks.cpu_peak(16, 2.5, "bf16") == 16 * 2.5e9 * 128
    assert peaks.cpu_peak(4, model="Intel(R) Xeon(R) Gold 6230 CPU @ 2.10GHz") == 4 * 2.1e9 * 64
    assert peaks.cpu_peak(4, model="AMD EPYC 7763") == 4 * peaks.CPU_DEFAULT_GHZ * 1e9 * 64
    assert peaks.cpu_peak(2, 1.0, flop_per_cycle=1024) == 2 * 1e9 * 1024


def test_system_peak() -> None:
    value, how = peaks.system_peak({"accelerator_model": "NVIDIA L40S", "accelerator_count": 4}, "bf16")
    assert value == 4 * 362.05 * T and "L40S" in how
    value, how = peaks.system_peak({"accelerator_model": "cpu", "accelerator_count": 0, "cpu_cores": 8,
                                    "cpu_model": "x @ 3.00GHz"}, "fp32")
    assert value == 8 * 3e9 * 64 and "CPU" in how
    value, how = peaks.system_peak({"accelerator_model": "Mystery X1", "accelerator_count": 2}, "fp32")
    assert value is None and "not in the peak table" in how
