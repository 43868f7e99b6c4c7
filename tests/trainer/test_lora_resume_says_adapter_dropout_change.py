"""A resume says when the LoRA settings it applies differ from those its step's manifest
records, in the line that names changed config keys (trainer/config_history.py,
trainer/lora.py). A loaded adapter's lora_dropout is read from its adapter_config.json at every
start, which config.yaml does not hold: edited between stop and resume (or forced to 0 by an
older mfsdp that saved the step), the steps after the resumed one trained with another dropout
without a word, and the next manifest recorded it for the whole run. Settings that change the
checkpoint's shapes stay refused."""

from __future__ import annotations

import json

import pytest

from mfsdp_ckpt.format.manifest import read_manifest
from tests.support.override_lists import replaced
from tests.support.sft import tiny_config, write_chat_jsonl
from tests.trainer import test_lora_adapter_dir
from tests.trainer.test_lora_adapter_dir import CONFIG, _edited
from tests.trainer.test_lora_rslora_resume_names_adapter_path import RESUMABLE
from trainer.resume import ResumeMismatchError
from trainer.sft import run_sft

adapter = test_lora_adapter_dir.adapter  # its fixture: a PEFT adapter on q_proj, v_proj
CHANGED = "resumed with LoRA settings changed"


def _stop_and_resume(tmp_path, loaded, capsys, edit=None, *resumed_with):
    """Train step 1 from `loaded`, apply `edit` to its adapter_config.json, resume to step 2:
    the resume's stderr."""
    data, run = write_chat_jsonl(tmp_path / "train.jsonl", rows=8), tmp_path / "run"
    settings = (*RESUMABLE, f"model.lora_adapter_path={loaded}", "trainer.total_steps=2")
    assert run_sft(tiny_config(data, run, *settings, "trainer.stop_at_step=1")).final_step == 1
    if edit is not None:
        config = json.loads((loaded / CONFIG).read_text())
        (loaded / CONFIG).write_text(json.dumps({**config, **edit}))
    capsys.readouterr()
    result = run_sft(tiny_config(data, run, *settings, *resumed_with))
    assert (result.resumed_from, result.final_step) == (1, 2)
    return capsys.readouterr().err


@pytest.mark.parametrize(("then", "now"), [(0.3, 0.0), (0.0, 0.3)])
def test_a_resume_says_the_adapters_lora_dropout_changed(adapter, tmp_path, capsys, then, now):
    loaded = _edited(adapter, tmp_path, lora_dropout=then)
    said = _stop_and_resume(tmp_path, loaded, capsys, {"lora_dropout": now})
    manifest = tmp_path / "run" / "global_step_1" / "manifest.json"
    lines = [line for line in said.splitlines() if CHANGED in line]
    assert lines == [
        f"[sft] {CHANGED} since step 1: lora_dropout {then!r} -> {now!r}"
        f" ({loaded / CONFIG}); {manifest} records those step 1 was trained with"
    ]
    recorded = read_manifest(manifest).lora
    assert recorded is not None and recorded["lora_dropout"] == then


def test_an_unchanged_adapter_resumes_without_a_note(adapter, tmp_path, capsys):
    loaded = _edited(adapter, tmp_path, lora_dropout=0.3)
    said = _stop_and_resume(tmp_path, loaded, capsys)
    assert "resumed with" not in said


def test_a_config_change_and_a_dropout_change_are_one_line(adapter, tmp_path, capsys):
    loaded = _edited(adapter, tmp_path, lora_dropout=0.3)
    said = _stop_and_resume(tmp_path, loaded, capsys, {"lora_dropout": 0.1}, "optim.lr=0.01")
    (line,) = [line for line in said.splitlines() if "resumed with" in line]
    assert "settings changed since step 1: optim.lr" in line
    assert f"lora_dropout 0.3 -> 0.1 ({loaded / CONFIG})" in line


def test_a_resume_with_another_lora_rank_is_still_refused(tmp_path):
    data, run = write_chat_jsonl(tmp_path / "train.jsonl", rows=8), tmp_path / "run"
    fresh = (*RESUMABLE, "model.lora_rank=2", "model.target_modules=[q_proj]")
    run_sft(tiny_config(data, run, *fresh, "trainer.total_steps=1"))
    said = r"checkpoint was trained with model\.lora_rank=2, this run has model\.lora_rank=4"
    with pytest.raises(ResumeMismatchError, match=said):
        rank_4 = replaced(fresh, "model.lora_rank=4", "trainer.total_steps=2")
        run_sft(tiny_config(data, run, *rank_4))
