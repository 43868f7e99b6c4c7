"""The huggingface/ dir (config and tokenizer, no weights) of a step in a format mfsdp does
not read (verl's FSDP backend, Megatron's torch_dist under verl's Megatron backend), given
as `model.path` or to `ckpt import-hf`: both sent the user to the enclosing step
(model.path=STEP, `export-hf STEP`), which is refused next, and import-hf spoke of "DCP
files" that are not there. Now each gives that step's own refusal, naming what converts
it; a step mfsdp reads keeps the advice to give or export it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.support.cli_errors import one_error
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import save_dcp
from tests.support.paths import FIXTURES
from trainer.config import ConfigError, ModelConfig
from trainer.model_source import resolve_model_source


def _hf_dir(actor: Path) -> Path:
    """verl's actor/huggingface/: the model's config (and tokenizer), no weights."""
    hf = actor / "huggingface"
    tiny_causal_lm("qwen2", vocab=64).config.save_pretrained(hf)
    return hf


def _verl_fsdp_step(root: Path) -> Path:
    """verl's FSDP backend: per-rank torch.save shards in actor/."""
    actor = root / "run" / "global_step_4" / "actor"
    actor.mkdir(parents=True)
    for rank in range(2):
        torch.save({}, actor / f"model_world_size_2_rank_{rank}.pt")
    (root / "run" / "latest_checkpointed_iteration.txt").write_text("4")
    return actor


def _verl_torch_dist_step(root: Path) -> Path:
    """verl's Megatron backend without Megatron-FSDP: dist_ckpt/ saved as torch_dist."""
    actor = root / "run" / "global_step_4" / "actor"
    save_dcp({"decoder.final_layernorm.weight": torch.zeros(4)}, actor / "dist_ckpt")
    (actor / "dist_ckpt" / "metadata.json").write_text(
        json.dumps({"sharded_backend": "torch_dist"})
    )
    torch.save({}, actor / "dist_ckpt" / "common.pt")
    (root / "run" / "latest_checkpointed_iteration.txt").write_text("4")
    return actor


UNREAD = {
    "verl_fsdp": (
        _verl_fsdp_step,
        "a verl FSDP checkpoint",
        "python -m verl.model_merger merge --backend fsdp --local_dir {actor} --target_dir OUT",
    ),
    "verl_torch_dist": (
        _verl_torch_dist_step,
        "a Megatron dist_checkpointing (torch_dist) checkpoint",
        "verl.model_merger merge --backend megatron",
    ),
}


@pytest.mark.parametrize("case", list(UNREAD))
def test_model_path_gives_the_steps_own_refusal(tmp_path, case):
    build, what, converter = UNREAD[case]
    actor = build(tmp_path)
    hf = _hf_dir(actor)
    with pytest.raises(ConfigError) as raised:
        resolve_model_source(ModelConfig(path=str(hf)))
    message = str(raised.value)
    assert message.startswith(f"model.path: {hf} holds the config and tokenizer of"), message
    assert what in message and converter.format(actor=actor) in message, message
    assert "give model.path=" not in message and "random_init" not in message


@pytest.mark.parametrize("case", list(UNREAD))
def test_import_hf_gives_the_steps_own_refusal(tmp_path, case):
    build, what, converter = UNREAD[case]
    actor = build(tmp_path)
    hf = _hf_dir(actor)
    code, stdout, err = run_cli("ckpt", "import-hf", hf, "--out", tmp_path / "out")
    assert code == 2, stdout + err
    line = one_error(err, f"{hf}: no .safetensors weights", what, converter.format(actor=actor))
    assert "DCP files" not in line and "export-hf" not in line, line
    assert not (tmp_path / "out").exists()


def test_import_hf_of_a_step_mfsdp_reads_still_names_export_hf(tmp_path):
    step = FIXTURES / "megatron_fsdp_qwen2" / "run" / "global_step_2"
    code, stdout, err = run_cli("ckpt", "import-hf", step / "huggingface", "--out", tmp_path / "o")
    assert code == 2, stdout + err
    one_error(err, "whose weights are in its DCP files", f"`mfsdp ckpt export-hf {step} --out DIR`")
