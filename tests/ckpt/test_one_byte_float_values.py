"""NaN/Inf in one-byte float formats (fp8, fp4, e8m0), as a Megatron fp8 run's weights or an
8-bit optimizer's moments hold them. torch has no isinf/isfinite kernel for most of these
dtypes: `validate --deep` died with a traceback (and --json printed nothing), and export
and import copied their bytes file to file unchecked. They are now counted from their bit
patterns (`mfsdp_ckpt.format.finite`).
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed.checkpoint as dcp

from mfsdp_ckpt.format import dtypes
from mfsdp_ckpt.format.finite import count_nonfinite, count_nonfinite_tensor
from tests.reliability.hf_model import hf_model
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli

ONE_BYTE_FLOATS = [
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.float8_e4m3fnuz,
    torch.float8_e5m2fnuz,
    torch.float8_e8m0fnu,
]


@pytest.mark.parametrize("dtype", ONE_BYTE_FLOATS, ids=str)
def test_every_bit_pattern_is_counted_as_torch_upcasts_it(dtype):
    """All 256 bytes: non-finite exactly where the value, upcast to fp32, is."""
    every = torch.arange(256, dtype=torch.uint8).view(dtype)
    expected = int((~every.float().isfinite()).sum())
    assert expected > 0  # each format has a NaN
    assert count_nonfinite_tensor(every) == expected
    record = dtypes.BY_NAME[str(dtype).removeprefix("torch.")]
    raw = memoryview(torch.arange(256, dtype=torch.uint8).numpy())
    assert count_nonfinite(raw, record) == expected


def test_packed_fp4_has_no_nonfinite_values():
    every = torch.arange(256, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    assert count_nonfinite_tensor(every) == 0


def _fp8_checkpoint(path, nan: bool):
    weight = torch.linspace(-2, 2, 48).reshape(6, 8).to(torch.float8_e4m3fn)
    if nan:
        weight.view(torch.uint8)[1, 2] = 0x7F  # e4m3fn's NaN
    state = {"model": {"w": weight}, "optimizer": {"state": {"w": {"exp_avg": weight.clone()}}}}
    dcp.save(state, checkpoint_id=str(path))
    return path


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_deep_validate_reads_fp8_and_names_its_nan(tmp_path):
    clean = _fp8_checkpoint(tmp_path / "clean", nan=False)
    code, stdout, err = run_cli("ckpt", "validate", "--deep", "--json", clean)
    assert code == 0 and json.loads(stdout)["valid"], stdout + err
    broken = _fp8_checkpoint(tmp_path / "broken", nan=True)
    code, stdout, err = run_cli("ckpt", "validate", "--deep", "--json", broken)
    report = json.loads(stdout)
    assert code == 1 and not report["valid"], stdout + err
    found = {f["where"]: f["message"] for f in report["findings"]}
    assert found["[model.w]"] == "1 NaN and 0 Inf values", found
    assert found["[optimizer.state.w.exp_avg]"] == "1 NaN and 0 Inf values", found


def test_import_refuses_fp8_weights_holding_nan(tmp_path):
    def nan_in_norm(tensors):
        for name, tensor in list(tensors.items()):
            tensors[name] = tensor.to(torch.float8_e4m3fn)
        tensors["model.norm.weight"].view(torch.uint8)[0] = 0xFF  # e4m3fn's -NaN

    model = hf_model(tmp_path, edit=nan_in_norm)
    code, _out, err = run_cli("ckpt", "import-hf", model, "--out", tmp_path / "out")
    assert code == 1, err
    one_error(err, "model.norm.weight", "1 NaN/Inf")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_nan_and_inf_are_counted_across_the_pieces_a_large_tensor_is_read_in(dtype):
    """Counted a piece at a time (a mask of the whole tensor took a quarter of its bytes
    more, and a tensor that just fit in memory failed validate --deep with a traceback):
    values at the pieces' edges and in a last short piece are counted once each."""
    from mfsdp_ckpt.format.finite import PIECE_ELEMENTS, count_nan_tensor

    values = torch.zeros(2 * PIECE_ELEMENTS + 3, dtype=dtype)
    nan_at = [0, PIECE_ELEMENTS - 1, PIECE_ELEMENTS, 2 * PIECE_ELEMENTS + 2]
    values[nan_at] = float("nan")
    values[[5, 2 * PIECE_ELEMENTS]] = float("inf")
    grid = values.reshape(-1, 1)  # any shape: the count is over its elements
    assert count_nonfinite_tensor(grid) == 6 and count_nan_tensor(grid) == 4
