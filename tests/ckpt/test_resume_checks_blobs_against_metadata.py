"""A load through `safe_dcp` (every resume, GRPO and LoRA resumes too) checks each tensor
blob against `.metadata` as validate --deep and export-hf do: a blob of another dtype or
shape than its entry says is refused in validate's one line naming file and key, before
any weight is overwritten. Was: stock DCP's `copy_` cast a bf16 (or int64) blob into the
float32 parameter, the run trained and saved on it with exit 0; a shape mismatch surfaced
as DCP's AssertionError naming the directory. Stored NaN/Inf are refused at the load,
naming file and key, not reported a step later as a NaN gradient."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from mfsdp_ckpt.checkpoint_failures import load_failure
from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.storage.reader import CheckpointReader
from mfsdp_ckpt.storage.safe_dcp import SafeFileSystemReader, SafeLoadPlanner
from tests.support.megatron_checkpoints import save_dcp

KEY = "model.w"


def _saved(tmp_path: Path, stored: dict[str, torch.Tensor], edit: Callable | None = None) -> Path:
    """`stored` saved as DCP under `model.`; `edit` then changes its `.metadata` (the
    blobs stay as saved)."""
    ckpt = save_dcp({"model": stored}, tmp_path / "ck")
    if edit is not None:
        metadata = pickle.loads((ckpt / ".metadata").read_bytes())
        edit(metadata.state_dict_metadata)
        (ckpt / ".metadata").write_bytes(pickle.dumps(metadata))
    return ckpt


def _refusal(ckpt: Path, model: dict[str, torch.Tensor]) -> str:
    """The line a resume of `ckpt` into `model` prints."""
    with pytest.raises(CheckpointException) as refused:
        dcp.load(
            {"model": model},
            storage_reader=SafeFileSystemReader(str(ckpt)),
            planner=SafeLoadPlanner(allow_partial_load=True),
            no_dist=True,
        )
    said = str(load_failure(refused.value, ckpt, {}))
    assert "\n" not in said, said
    return said


def _deep_read(ckpt: Path, key: str) -> str:
    """What validate --deep and export-hf say of the same entry (`CheckpointReader`)."""
    with pytest.raises(CheckpointFormatError) as refused:
        CheckpointReader(ckpt).read_tensor(key)
    return str(refused.value)


def _say_float32(entries: dict) -> None:
    entries[KEY].properties.dtype = torch.float32


@pytest.mark.parametrize("stored_dtype", [torch.bfloat16, torch.int64])
def test_a_blob_of_another_dtype_is_refused_before_any_weight_is_overwritten(
    tmp_path, stored_dtype
):
    stored = {"a": torch.ones(3), "w": torch.full((4,), 2**40 + 1).to(stored_dtype)}
    ckpt = _saved(tmp_path, stored, _say_float32)  # bf16/int64 bytes, metadata: float32
    (data,) = ckpt.glob("*.distcp")
    model = {"a": torch.zeros(3), "w": torch.zeros(4)}
    said = _refusal(ckpt, model)
    line = f"{data} [{KEY}]: blob holds {stored_dtype} data, metadata says torch.float32"
    assert line in said, said
    assert line == _deep_read(ckpt, KEY)  # the very check validate --deep runs
    assert not model["a"].any() and not model["w"].any()  # nothing was copied in


def test_a_blob_of_another_shape_names_the_file_and_key(tmp_path):
    def say_two_by_two(entries: dict) -> None:
        entries[KEY].size = torch.Size([2, 2])
        entries[KEY].chunks[0].sizes = torch.Size([2, 2])
        entries[KEY].chunks[0].offsets = torch.Size([0, 0])

    ckpt = save_dcp({"model": {"w": torch.randn(4)}}, tmp_path / "ck")
    metadata = pickle.loads((ckpt / ".metadata").read_bytes())
    say_two_by_two(metadata.state_dict_metadata)
    (index,) = [i for i in metadata.storage_data if i.fqn == KEY]
    info = metadata.storage_data.pop(index)
    metadata.storage_data[type(index)(KEY, torch.Size([0, 0]))] = info
    (ckpt / ".metadata").write_bytes(pickle.dumps(metadata))
    (data,) = ckpt.glob("*.distcp")
    said = _refusal(ckpt, {"w": torch.zeros(2, 2)})
    line = f"{data} [{KEY}]: chunk holds shape (4,), metadata says (2, 2)"
    assert line in said, said
    assert line == _deep_read(ckpt, KEY)


@pytest.mark.parametrize(
    ("value", "words"), [(float("nan"), "1 NaN and 0 Inf"), (float("inf"), "0 NaN and 1 Inf")]
)
def test_stored_nonfinite_weights_are_refused_at_the_load(tmp_path, value, words):
    ckpt = _saved(tmp_path, {"w": torch.tensor([1.0, value, 3.0])})
    (data,) = ckpt.glob("*.distcp")
    said = _refusal(ckpt, {"w": torch.zeros(3)})
    assert f"{data} [{KEY}]: {words} values" in said, said


def test_a_matching_checkpoint_still_loads(tmp_path):
    stored = {"w": torch.randn(4, dtype=torch.bfloat16), "n": torch.arange(3)}
    ckpt = _saved(tmp_path, stored)
    model = {"w": torch.zeros(4, dtype=torch.bfloat16), "n": torch.zeros(3, dtype=torch.int64)}
    dcp.load(
        {"model": model},
        storage_reader=SafeFileSystemReader(str(ckpt)),
        planner=SafeLoadPlanner(allow_partial_load=True),
        no_dist=True,
    )
    assert torch.equal(model["w"], stored["w"]) and torch.equal(model["n"], stored["n"])
