"""A run started from a use_rslora adapter and resumed without it is refused naming the key
that sets use_rslora, model.lora_adapter_path, and the adapter dir the run's config.yaml
records (trainer/lora.py): it named "use_rslora", which is no mfsdp key. The run's own
config.yaml, which holds model.lora_rank beside the adapter, resumes it."""

from __future__ import annotations

import pytest

from tests.support.sft import SHORT_RUN, tiny_config, write_chat_jsonl
from tests.trainer import test_lora_adapter_dir
from tests.trainer.test_lora_adapter_dir import TARGETS, _edited
from trainer.config import SFTConfig, load_config
from trainer.resume import ResumeMismatchError
from trainer.sft import run_sft

# SHORT_RUN saving every step, resuming as a run does by default
RESUMABLE = (
    *(o for o in SHORT_RUN if not o.startswith("checkpoint.resume=")),
    "checkpoint.save_every=1",
)

adapter = test_lora_adapter_dir.adapter  # its fixture: a PEFT adapter on q_proj, v_proj


def test_resume_without_the_rslora_adapter_names_the_adapter_path(adapter, tmp_path):
    rslora = _edited(adapter, tmp_path, use_rslora=True)
    data, run = write_chat_jsonl(tmp_path / "train.jsonl", rows=8), tmp_path / "run"
    started = (f"model.lora_adapter_path={rslora}", "model.lora_rank=2", "trainer.total_steps=1")
    assert run_sft(tiny_config(data, run, *RESUMABLE, *started)).final_step == 1

    plain = ("model.lora_rank=2", "model.lora_alpha=4", f"model.target_modules={TARGETS}")
    with pytest.raises(ResumeMismatchError) as caught:
        run_sft(tiny_config(data, run, *RESUMABLE, *plain, "trainer.total_steps=2"))
    assert str(caught.value) == (
        f"{run / 'global_step_1' / 'manifest.json'}: the adapter was trained with use_rslora"
        " True, this run has False (set by model.lora_adapter_path;"
        f" {run / 'config.yaml'} records model.lora_adapter_path={rslora}): its scale would"
        " change; set it back (or a new trainer.run_dir to start over)"
    )

    resumed = load_config(SFTConfig, run / "config.yaml", ["trainer.total_steps=2"])
    result = run_sft(resumed)
    assert (result.resumed_from, result.final_step) == (1, 2)
