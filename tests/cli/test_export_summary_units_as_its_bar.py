"""The export summary says sizes in the units its progress bar counts and its rate is said
in: decimal. The same 504,909,824 bytes were `505M` in the bar and `481.52 MiB` next to
`(271.9 MB/s)` in the summary."""

from __future__ import annotations

import re

import pytest
from safetensors import safe_open
from tqdm import tqdm

from mfsdp_ckpt.convert.import_hf import import_hf
from mfsdp_ckpt.convert.units import human_bytes
from tests.support.hf_model_files import saved_hf_model
from tests.support.interop_layouts import run_cli

_PREFIX = {"k": 1e3, "M": 1e6, "G": 1e9, "": 1.0}


def _bytes_said(text: str) -> float:
    """`505M` (the bar's) or `504.91 MB` (the summary's) as a byte count."""
    found = re.fullmatch(r"([\d.]+) ?([kMG]?)B?", text)
    assert found, text
    return float(found[1]) * _PREFIX[found[2]]


@pytest.mark.parametrize("count", [2_345, 1_300_000, 504_909_824, 3 * 10**9 + 7])
def test_the_summary_size_reads_as_the_bar_counts(count):
    bar = tqdm.format_sizeof(count, divisor=1000)  # what a bar of unit "B", unit_scale, shows
    said = human_bytes(count)
    assert said.endswith(("kB", "MB", "GB")), said
    assert _bytes_said(said) == pytest.approx(_bytes_said(bar), rel=0.01), (said, bar)
    assert _bytes_said(said) == pytest.approx(count, rel=0.005)


def test_the_export_summary_line_says_decimal_units(tmp_path):
    source = saved_hf_model(tmp_path, "qwen2", tied=True)
    run = tmp_path / "run"
    import_hf(source, run, layout_name="hf")
    code, stdout, stderr = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 0, stderr
    (line,) = [line for line in (stdout + stderr).splitlines() if line.startswith("exported ")]
    assert "MiB" not in line and "GiB" not in line and "KiB" not in line, line
    size = re.search(r"tensors, ([\d.]+ [kMG]B) in ", line)
    rate = re.search(r"\(([\d.]+ [kMG]B)/s\)", line)
    assert size and rate, line
    written = 0
    for path in (tmp_path / "hf").glob("*.safetensors"):
        with safe_open(path, "pt") as weights:
            for name in weights.keys():
                tensor = weights.get_tensor(name)
                written += tensor.numel() * tensor.element_size()
    assert _bytes_said(size[1]) == pytest.approx(written, rel=0.005), (line, written)
