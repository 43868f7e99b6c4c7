"""A model dir's weight file is checked in full (a regular file resolving inside the dir)
once, not once per tensor. The check walks every folder of the path with lstat, twice:
about 15 calls per tensor, most of the time import-hf took for a MoE checkpoint of tens of
thousands of small tensors. A later open is kept only while it is the very file checked:
one swapped for a link out of the dir is still refused."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from mfsdp_ckpt.storage.safetensors_source import SafetensorsError, SafetensorsSource

TENSORS = 200


def _model_dir(path: Path, value: float) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    weights = {f"w.{i}": np.full((4, 4), value, np.float32) for i in range(TENSORS)}
    save_file(weights, str(path / "model.safetensors"))
    return path


def _lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every os.lstat and os.stat call from here on, by path."""
    calls: list[str] = []
    for name in ("lstat", "stat"):
        real = getattr(os, name)

        def counted(path, *args, _real=real, **kwargs):
            calls.append(str(path))
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(os, name, counted)
    return calls


def test_reading_every_tensor_looks_the_file_up_a_few_times_not_per_tensor(tmp_path, monkeypatch):
    source = SafetensorsSource(_model_dir(tmp_path / "a" / "b" / "model", 1.0))
    first, *rest = source.tensors.values()
    source.count_nonfinite(first), source.read(first.name)  # what numpy and torch set up once
    calls = _lookups(monkeypatch)
    for entry in rest:
        assert source.count_nonfinite(entry) == 0
        assert float(source.read(entry.name)[0, 0]) == 1.0
    assert len(calls) < TENSORS // 4, f"{len(calls)} lookups for {TENSORS} tensors"


def test_a_weight_file_replaced_after_the_check_is_checked_again(tmp_path):
    model = _model_dir(tmp_path / "model", 1.0)
    source = SafetensorsSource(model)
    name = next(iter(source.tensors))
    assert float(source.read(name)[0, 0]) == 1.0
    _model_dir(tmp_path / "other", 2.0)
    os.replace(tmp_path / "other" / "model.safetensors", model / "model.safetensors")
    assert float(source.read(name)[0, 0]) == 2.0  # a new file, same layout: read as it is now
    outside = _model_dir(tmp_path / "outside", 3.0) / "model.safetensors"
    (model / "model.safetensors").unlink()
    (model / "model.safetensors").symlink_to(outside)
    with pytest.raises(SafetensorsError, match="resolves outside"):
        source.read(name)
