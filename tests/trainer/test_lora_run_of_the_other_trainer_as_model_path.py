"""`model.path=<an mfsdp LoRA run>` told the user to resume it as trainer.run_dir, which the
other trainer refuses (`train sft` does not resume a GRPO run's step, and the reverse),
and offered otherwise only the merged model, which bakes the adapter into a new base. The
refusal now names the trainer that resumes it and the route that goes on with the same
adapter in any run: export it alone, then model.lora_adapter_path over the recorded base.
The route is followed here from an SFT run into GRPO."""

from __future__ import annotations

import pytest

from tests.support.grpo import grpo_config, write_rl_rows
from tests.support.interop_layouts import run_cli
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.config import ConfigError, ModelConfig
from trainer.grpo.runner import run_grpo
from trainer.model_source import resolve_model_source
from trainer.sft import run_sft
from trainer.tiny import build_tiny_model_dir


def _refusal(run) -> str:
    with pytest.raises(ConfigError) as raised:
        resolve_model_source(ModelConfig(path=str(run)))
    return str(raised.value)


def test_an_sft_lora_run_goes_on_in_grpo_as_an_adapter_over_its_base(tmp_path):
    base = build_tiny_model_dir(tmp_path / "base", seed=0, with_weights=True)
    chat = write_chat_jsonl(tmp_path / "train.jsonl", rows=8)
    sft = tmp_path / "sft"
    lora = (f"model.path={base}", "model.lora_rank=4", "data.global_batch_size=4")
    run_sft(tiny_config(chat, sft, *lora, "trainer.total_steps=1"))
    message = _refusal(sft)
    assert message.startswith(f"model.path: {sft} is an mfsdp LoRA checkpoint"), message
    assert "with `mfsdp train sft`, which wrote it, give its run dir as trainer.run_dir" in message
    route = f"`mfsdp ckpt export-hf {sft} --adapter-only --out DIR`, then model.path={base}"
    assert f"{route} model.lora_adapter_path=DIR" in message, message
    assert f"`mfsdp ckpt export-hf {sft} --out DIR`, then model.path=DIR" in message

    adapter = tmp_path / "adapter"
    code, stdout, err = run_cli("ckpt", "export-hf", sft, "--adapter-only", "--out", adapter)
    assert code == 0, stdout + err
    rows = write_rl_rows(tmp_path / "rl.jsonl")
    grpo = tmp_path / "grpo"
    settings = (f"model.path={base}", f"model.lora_adapter_path={adapter}")
    done = run_grpo(grpo_config(rows, grpo, *settings))
    assert done.final_step == 2
    assert "with `mfsdp train grpo`, which wrote it," in _refusal(grpo)
