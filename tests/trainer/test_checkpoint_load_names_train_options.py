"""A checkpoint's weights loaded by `mfsdp train` (model.path) go through export's planning,
and a refusal there names what the command at hand takes. Was: a head trained apart from
the embedding it is tied to asked the trainer's user to "pass --hf-config
DIR|config.json", and a Megatron adapter saved without its base weights to "export it with
--adapter-only": flags of `mfsdp ckpt export-hf`, which `mfsdp train` does not take ("No
such option"). Now the tied head names the config the way the command takes one
(`config_option`: `model.hf_config=DIR` for the trainer, `--hf-config` for export-hf and
validate), and the adapter's remedies name export-hf, whose flags they are."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.convert.export_errors import ExportError, ExportUsageError
from mfsdp_ckpt.convert.export_plan import plan_export
from mfsdp_ckpt.convert.export_source import source_for
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.megatron_checkpoints import bridge_run, save_dcp
from tests.support.model_dirs import tokenizer_config_edit, train_from
from tests.support.sft import write_chat_jsonl
from trainer.model_source import HF_CONFIG_KEY

EXPORT_FLAG = "--hf-config"
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }} {% endfor %}"


@pytest.fixture(scope="module")
def untied(tmp_path_factory) -> tuple[Path, object]:
    """(a checkpoint of a tied Qwen2 whose stored head was trained apart from its
    embedding, its config)."""
    root = tmp_path_factory.mktemp("untied")
    model = tiny_causal_lm("qwen2", vocab=64)
    state = {name: value.clone() for name, value in model.state_dict().items()}
    state["lm_head.weight"] += 0.5
    save_dcp({"model": state}, root / "dist_ckpt")
    model.config.save_pretrained(root / "huggingface")
    return root, model.config


def _refusal(checkpoint: Path, config, **options) -> ExportError | ExportUsageError:
    paths = resolve_checkpoint(checkpoint)
    source = source_for(paths, CheckpointReader(paths.dist_ckpt))
    with pytest.raises((ExportError, ExportUsageError)) as caught:
        plan_export(source, config, dtype="fp32", **options)
    return caught.value


def test_the_trainers_own_config_refusal_asks_for_model_hf_config(untied):
    checkpoint, config = untied
    refusal = _refusal(checkpoint, config, config_option=HF_CONFIG_KEY)
    assert type(refusal) is ExportError, refusal  # the checkpoint's own config: exit 1
    assert str(refusal).endswith(
        "but the checkpoint's own config says tie_word_embeddings=true;"
        " pass model.hf_config=DIR with tie_word_embeddings false"
    ), refusal
    assert EXPORT_FLAG not in str(refusal)


def test_a_tied_model_hf_config_is_named_as_the_trainer_takes_it(untied, tmp_path):
    checkpoint, config = untied
    given = tmp_path / "model"
    refusal = _refusal(checkpoint, config, hf_config=given, config_option=HF_CONFIG_KEY)
    assert type(refusal) is ExportUsageError, refusal  # the user's config: exit 2
    assert str(refusal).endswith(
        f"but model.hf_config={given} says tie_word_embeddings=true;"
        " give a config with tie_word_embeddings false"
    ), refusal
    assert EXPORT_FLAG not in str(refusal)


def test_export_and_validate_still_name_their_flag(untied):
    checkpoint, config = untied
    assert str(_refusal(checkpoint, config)).endswith(
        "pass --hf-config DIR|config.json with tie_word_embeddings false"
    )


def _adapter_without_base(root: Path) -> Path:
    """Megatron-Bridge's PEFT save of a tiny Qwen2: one LoRA adapter's tensors (on layer 0's
    attention output projection), no base weights, the run's tokenizer beside them (given
    a chat template)."""
    model = tiny_causal_lm("qwen2", vocab=500)
    run = bridge_run(root, model, steps=(10,), rows=512)
    step = run / "iter_0000010"
    for file in [*step.glob("*.distcp"), step / ".metadata"]:
        file.unlink()
    hidden, rank = model.config.hidden_size, 4
    stem = "module.decoder.layers.0.self_attention.linear_proj.adapter."
    adapter = {
        f"{stem}linear_in.weight": torch.randn(rank, hidden),
        f"{stem}linear_out.weight": torch.zeros(hidden, rank),
    }
    save_dcp({"model": adapter, "checkpoint_version": 3.0, "iteration": 10}, step)
    tokenizer_config_edit(chat_template=CHAT_TEMPLATE)(step / "tokenizer")  # SFT rows are chats
    return run


def test_train_from_an_adapter_without_base_names_export_hf(tmp_path):
    run = _adapter_without_base(tmp_path)
    table = write_chat_jsonl(tmp_path / "train.jsonl", rows=24)
    code, stderr = train_from(run, table, tmp_path / "out")
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1, stderr
    assert "no base weights" in errors[0], errors[0]
    assert "`mfsdp ckpt export-hf --adapter-only`" in errors[0], errors[0]
    assert "`mfsdp ckpt export-hf --hf-config BASE_DIR`" in errors[0], errors[0]
