"""A LoRA step whose data files were replaced by the same-named files of a later step of
its run is refused by both of its exports, naming the file and key.

Was: a LoRA export (`--adapter-only` and the merged one) read the adapter through a plain
reader, so the manifest's CRC of each model record (`model_records`) was never compared:
the adapter, or the merged model, mixed the two steps' weights, exit 0. Now the adapter is
read through the full export's checked reader (`export_write.reading_checked`).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.format import layout
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft


@pytest.fixture(scope="module")
def lora_steps(tmp_path_factory) -> tuple[Path, Path]:
    """(step 1, step 2) of one LoRA run of the tiny model, the adapter trained between."""
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("lora_another_step")
    base = build_tiny_model_dir(root / "base", seed=0, with_weights=True)
    data = write_chat_jsonl(root / "train.jsonl", rows=8)
    settings = (
        f"model.path={base}",
        "model.lora_rank=4",
        "model.target_modules=[q_proj,v_proj]",
        "data.global_batch_size=4",
        "trainer.total_steps=2",
        "checkpoint.save_every=1",
    )
    run_sft(tiny_config(data, root / "run", *settings))
    return root / "run" / "global_step_1", root / "run" / "global_step_2"


def _files_without_the_step(step: Path) -> set[str]:
    """The step's data files but the one holding `extra.step` (refused by the older step
    check, which is not the one tested here)."""
    reader = CheckpointReader(step / layout.DIST_CKPT_DIR)
    tensors = {c.file for e in reader.tensors.values() for c in e.chunks if c.file is not None}
    return tensors - {reader.objects["extra.step"].file}


def _mixed(steps: tuple[Path, Path], root: Path) -> Path:
    """A copy of step 1 whose data files (but the step's) are step 2's (same names and sizes,
    each record's own CRC valid: only the manifest can tell)."""
    step = Path(shutil.copytree(steps[0], root / "global_step_1"))
    names = _files_without_the_step(step)
    assert names
    for name in names:
        data, later = (s / layout.DIST_CKPT_DIR / name for s in (step, steps[1]))
        assert later.stat().st_size == data.stat().st_size
        shutil.copy2(later, data)
    return step


@pytest.mark.parametrize("flags", [["--adapter-only"], []], ids=["adapter", "merged"])
def test_a_lora_step_with_a_data_file_of_another_step_is_refused(lora_steps, tmp_path, flags):
    step = _mixed(lora_steps, tmp_path)
    out = tmp_path / "out"
    code, stdout, err = run_cli("ckpt", "export-hf", step, "--out", out, *flags)
    assert code == 1, stdout + err
    line = one_error_line(err)
    assert re.match(rf"error: {re.escape(str(step))}/dist_ckpt/__0_\d+\.distcp \[model\.", line)
    assert "manifest.json records" in line
    assert not out.exists()


@pytest.mark.parametrize("flags", [["--adapter-only"], []], ids=["adapter", "merged"])
def test_an_intact_lora_step_exports(lora_steps, tmp_path, flags):
    code, stdout, err = run_cli("ckpt", "export-hf", lora_steps[0], "--out", tmp_path / "o", *flags)
    assert code == 0, stdout + err
