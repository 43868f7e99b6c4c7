"""SFT's MFU peak is a function of the device's name: the measured H200 peak on an H200
(SXM) alone, told by its whole name; on any other GPU MFU is left out, with one note, unless
`trainer.peak_tflops` gives it. Was: 790 TFLOP/s (an H200's) on every CUDA device, an H100 or
an A100 too; then on every name holding "H200", a GH200 (H100-class) and an H200 NVL too."""

from __future__ import annotations

import pytest

from trainer.mfu_peak import H200_BF16_PEAK_TFLOPS, default_peak_tflops, peak_tflops


@pytest.mark.parametrize("name", ["NVIDIA H200", "nvidia h200", " NVIDIA H200 "])
def test_an_h200_has_its_measured_peak(name):
    assert default_peak_tflops(name) == H200_BF16_PEAK_TFLOPS == 790.0
    assert peak_tflops(None, name) == (790.0, None)


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA H100 80GB HBM3",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA GeForce RTX 4090",
        "NVIDIA GH200 480GB",
        "NVIDIA GH200 144G HBM3e",
        "NVIDIA H200 NVL",
    ],
)
def test_another_gpu_has_no_peak_and_says_so_once(name):
    assert default_peak_tflops(name) is None
    peak, note = peak_tflops(None, name)
    assert peak is None and note is not None
    assert name in note and "trainer.peak_tflops" in note and "perf/mfu" in note


def test_a_configured_peak_is_used_on_any_device():
    assert peak_tflops(989.0, "NVIDIA H100 80GB HBM3") == (989.0, None)
    assert peak_tflops(989.0, None) == (989.0, None)


def test_no_gpu_has_no_peak_and_no_note():
    assert peak_tflops(None, None) == (None, None)
