"""A LoRA run started from `model.lora_adapter_path` resumes once that dir is gone.

The resume stopped with exit 2, "model.lora_adapter_path: ... does not exist (a local PEFT
adapter dir is needed ...)", though the step holds the adapter and its manifest records r,
lora_alpha and target_modules. Now, where a step is to be resumed, the recorded values take
the dir's place with a note, in the launching process, `config check` and each rank alike
(`load_checked_config`), and the run goes on as it does with the dir there. A fresh start
without the dir is still refused; an adapter whose settings no model.* key gives (rslora) is
refused with the route that keeps them."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from cli.launch import load_checked_config
from tests.support.sft import SHORT_RUN, TINY_CONFIG, tiny_config, write_chat_jsonl
from tests.trainer import test_lora_adapter_dir
from tests.trainer.test_lora_adapter_dir import TARGETS, _edited
from trainer.config import ConfigError, SFTConfig
from trainer.local_paths import check_local_paths
from trainer.lora_gone_adapter import resume_without_adapter_dir
from trainer.sft import run_sft

RESUMABLE = (
    *(o for o in SHORT_RUN if not o.startswith("checkpoint.resume=")),
    "checkpoint.save_every=1",
)

adapter = test_lora_adapter_dir.adapter  # its fixture: a PEFT adapter, r 2, alpha 4


def _started(adapter: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(data, run dir) of a run whose step 1 trained from `adapter`."""
    data, run = write_chat_jsonl(tmp_path / "train.jsonl", rows=8), tmp_path / "run"
    given = (f"model.lora_adapter_path={adapter}", "trainer.total_steps=1")
    assert run_sft(tiny_config(data, run, *RESUMABLE, *given)).final_step == 1
    return data, run


def _resuming(data: Path, run: Path, adapter: Path) -> SFTConfig:
    return tiny_config(
        data, run, *RESUMABLE, f"model.lora_adapter_path={adapter}", "trainer.total_steps=2"
    )


def test_the_steps_adapter_resumes_as_the_dir_did(adapter, tmp_path, caplog):
    own = Path(shutil.copytree(adapter, tmp_path / "scratch_adapter"))
    data, run = _started(own, tmp_path)
    twin = Path(shutil.copytree(run, tmp_path / "twin"))
    with_dir = run_sft(_resuming(data, twin, own))  # the dir still there
    shutil.rmtree(own)

    cfg = _resuming(data, run, own)
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        resume_without_adapter_dir(cfg)
    model = cfg.model
    assert model.lora_adapter_path is None
    assert (model.lora_rank, model.lora_alpha, model.target_modules) == (2, 4, TARGETS)
    notes = [record.getMessage() for record in caplog.records if record.name == "mfsdp.config"]
    assert notes == [
        f"note: model.lora_adapter_path {own} does not exist; resuming"
        f" {run / 'global_step_1'} with its own adapter, as its manifest records it:"
        " model.lora_rank=2 model.lora_alpha=4 model.target_modules=[q_proj,v_proj]"
    ]
    without = run_sft(cfg)
    assert without.final_step == 2 and without.losses[2] == with_dir.losses[2]


def test_config_check_and_train_take_the_steps_adapter(adapter, tmp_path):
    own = Path(shutil.copytree(adapter, tmp_path / "scratch_adapter"))
    data, run = _started(own, tmp_path)
    shutil.rmtree(own)
    overrides = [f"data.train_files={data}", f"trainer.run_dir={run}", *RESUMABLE]
    overrides += [f"model.lora_adapter_path={own}", "trainer.total_steps=2"]
    cfg = load_checked_config(SFTConfig, str(TINY_CONFIG), overrides)
    assert cfg.model.lora_adapter_path is None and cfg.model.lora_rank == 2


def test_a_fresh_start_without_the_dir_is_refused(tmp_path):
    gone = tmp_path / "gone"
    cfg = tiny_config(tmp_path / "train.jsonl", tmp_path / "run", f"model.lora_adapter_path={gone}")
    resume_without_adapter_dir(cfg)
    assert cfg.model.lora_adapter_path == str(gone)
    with pytest.raises(ConfigError, match="does not exist \\(a local PEFT adapter dir is needed"):
        check_local_paths(cfg)


def test_an_rslora_adapter_is_refused_with_the_export_route(adapter, tmp_path):
    rslora = _edited(adapter, tmp_path, use_rslora=True)
    data, run = _started(rslora, tmp_path)
    shutil.rmtree(rslora)
    with pytest.raises(ConfigError) as caught:
        resume_without_adapter_dir(_resuming(data, run, rslora))
    step = run / "global_step_1"
    assert str(caught.value) == (
        f"model.lora_adapter_path: {rslora} does not exist, and the adapter {step} resumes has"
        f" use_rslora True, which only an adapter dir sets: export it with `mfsdp ckpt"
        f" export-hf {step} --adapter-only --out DIR` and give model.lora_adapter_path=DIR"
        " (the run trains on from the step's weights)"
    )
