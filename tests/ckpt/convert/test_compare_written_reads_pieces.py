"""The LoRA exports' --verify (`compare_written`): each written tensor is compared bit for
bit with a fresh computation of it, read back a piece at a time from the file the export
wrote; a tensor that differs, one of another dtype or shape, and one missing are named."""

from pathlib import Path

import torch
from safetensors.torch import save_file

from mfsdp_ckpt.convert.tensor_writes import compare_written

WEIGHTS = {
    "a.weight": torch.arange(12, dtype=torch.float32).reshape(3, 4),
    "b.weight": torch.full((5,), 0.5, dtype=torch.bfloat16),
}


def _written(tmp_path: Path, weights: dict[str, torch.Tensor]) -> Path:
    file = tmp_path / "model.safetensors"
    save_file(weights, str(file), metadata={"format": "pt"})
    return file


def test_an_equal_file_has_no_problems(tmp_path):
    file = _written(tmp_path, WEIGHTS)
    assert compare_written(file, list(WEIGHTS), WEIGHTS.__getitem__) == []


def test_a_changed_value_another_dtype_and_a_missing_tensor_are_named(tmp_path):
    changed = WEIGHTS["a.weight"].clone()
    changed[2, 3] = -1.0
    file = _written(tmp_path, {"a.weight": changed, "b.weight": WEIGHTS["b.weight"].float()})
    problems = compare_written(file, [*WEIGHTS, "c.weight"], WEIGHTS.__getitem__)
    assert problems == [
        f"a.weight: differs in {file} from what its sources give",
        f"b.weight: differs in {file} from what its sources give",
        f"c.weight: missing from {file}",
    ]


def test_a_difference_in_a_later_piece_is_found(tmp_path):
    """The written tensor is read a piece at a time: a difference past the first piece counts."""
    from mfsdp_ckpt.convert.export_verify import COMPARE_PIECE_BYTES

    wanted = torch.zeros(COMPARE_PIECE_BYTES // 4 + 8, dtype=torch.float32)  # two pieces
    written = wanted.clone()
    written[-1] = 1.0
    file = _written(tmp_path, {"z": written})
    assert compare_written(file, ["z"], {"z": wanted}.__getitem__) == [
        f"z: differs in {file} from what its sources give"
    ]
