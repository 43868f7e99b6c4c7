"""The per-device peak that SFT's MFU (`perf/mfu`) divides by. Only a measured peak is
assumed: 1xH200's bf16 matmul peak, on that card alone (the H200 SXM). Any other GPU took
that peak too, so an H100 or an A100 showed an MFU read against another card's figure; there
MFU is left out (null) unless `trainer.peak_tflops` gives the peak. The card is told by its
whole name: a GH200 (an H100-class GPU) and an H200 NVL (lower clocks) have "H200" in
theirs too, and took the H200 SXM's peak, their MFU read too high."""

from __future__ import annotations

# 1xH200's bf16 matmul peak: bench/matmul_peak.py, best 791 (docs/benchmarks.md)
H200_BF16_PEAK_TFLOPS = 790.0
# What `torch.cuda.get_device_name` says of the H200 SXM the peak was measured on (the
# fixtures' provenance.json records it); an H200 NVL is "NVIDIA H200 NVL", a GH200
# "NVIDIA GH200 480GB".
H200_DEVICE_NAME = "NVIDIA H200"


def default_peak_tflops(device_name: str | None) -> float | None:
    """The bf16 peak (TFLOP/s) known for the CUDA device named `device_name`
    (`torch.cuda.get_device_name`), None for any other device or none (CPU)."""
    if device_name is not None and device_name.strip().upper() == H200_DEVICE_NAME.upper():
        return H200_BF16_PEAK_TFLOPS
    return None


def peak_tflops(
    configured: float | None, device_name: str | None
) -> tuple[float | None, str | None]:
    """The peak MFU is read against (`trainer.peak_tflops`, else the device's known one)
    and, where a CUDA device has none known, the note that says MFU is left out."""
    if configured is not None:
        return configured, None
    known = default_peak_tflops(device_name)
    if known is None and device_name is not None:
        return None, (
            f"note: perf/mfu is left out (null): no bf16 peak is known for {device_name};"
            " set trainer.peak_tflops=<TFLOP/s per device> to have it"
        )
    return known, None
