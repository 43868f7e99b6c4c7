"""`mfsdp train sft model.path=<Megatron checkpoint with multi-token prediction layers>`.

The transformers model the run builds has no MTP module, so the checkpoint's MTP layers can
never be trained here. Was: exit 1 with export's refusal, "pass --drop-mtp to export the
main model without them", a flag of `mfsdp ckpt export-hf`, not of `mfsdp train`. Now the
main model loads as `export-hf --drop-mtp` writes it, with one warning line naming the MTP
layers left out and the checkpoint they stay in.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from mfsdp_ckpt.convert.mtp import DROP_MTP_FLAG
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.megatron_checkpoints import megatron_args, megatron_run, mtp_weights
from tests.support.sft import launch_sft, tiny_config, write_chat_jsonl
from trainer.model import build_hf_config, build_model, load_tokenizer
from trainer.tiny import build_tokenizer

MTP_LAYERS = 2


def _mtp_run(root: Path) -> tuple[torch.nn.Module, Path, Path]:
    """(the source model, a Megatron-LM run of it trained with MTP_LAYERS MTP layers, the
    tokenizer dir the run's model.tokenizer names: Megatron-LM keeps none)."""
    tokenizer = build_tokenizer()
    tokenizer_dir = root / "tokenizer"
    tokenizer.save_pretrained(tokenizer_dir)
    model = tiny_causal_lm("qwen2", vocab=len(tokenizer))
    args = megatron_args(model, mtp_num_layers=MTP_LAYERS, mtp_loss_scaling_factor=0.1)
    run = megatron_run(root, model, args, mtp_layers=MTP_LAYERS)
    return model, run, tokenizer_dir


def test_sft_from_a_checkpoint_with_mtp_layers_trains_its_main_model_with_a_warning(
    tmp_path, caplog
):
    source, run, tokenizer_dir = _mtp_run(tmp_path)
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=8)
    given = (f"model.path={run}", f"model.tokenizer={tokenizer_dir}")
    _, stderr = launch_sft(data, tmp_path / "run", *given, "trainer.total_steps=1")
    warnings = [line for line in stderr.splitlines() if "multi-token prediction" in line]
    tensors = len(mtp_weights(source, MTP_LAYERS))
    assert len(warnings) == 1, stderr[-4000:]
    (warning,) = warnings
    assert f"{MTP_LAYERS} multi-token prediction (MTP) layers ({tensors} tensors)" in warning
    assert str(run / "iter_0000100") in warning and "left out" in warning, warning
    assert DROP_MTP_FLAG not in warning, warning  # no flag of mfsdp train
    cfg = tiny_config(data, tmp_path / "load", *given).model
    config = build_hf_config(cfg, load_tokenizer(cfg))
    with caplog.at_level(logging.WARNING, logger="mfsdp.model"):
        # as GRPO builds its actor and its reference from the one checkpoint: told once
        loaded, _reference = (build_model(cfg, config, torch.device("cpu"), 0) for _ in "ab")
    told = [r.getMessage() for r in caplog.records if "multi-token prediction" in r.getMessage()]
    assert told == [warning], told
    expected = dict(source.named_parameters())
    weights = dict(loaded.named_parameters())
    assert weights.keys() == expected.keys()
    for name, value in expected.items():
        assert torch.equal(weights[name], value), name
