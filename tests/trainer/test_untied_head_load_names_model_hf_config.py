"""`mfsdp train sft model.path=CKPT` of a checkpoint whose head was trained apart from the
embedding its config ties it to is refused in one line, exit 2, asking for the run's own
key, model.hf_config=DIR (was: export-hf's --hf-config, which `mfsdp train` does not take);
one given there is named as model.hf_config=DIR."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.megatron_checkpoints import save_dcp
from tests.support.model_dirs import train, train_from, trainable_model_dir


@pytest.fixture(scope="module")
def untied(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(a checkpoint of the trainable model tied, its head trained apart; its config dir;
    the SFT table)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("untied_load")
    model_dir, table = trainable_model_dir(root)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    model.config.tie_word_embeddings = True
    state = {name: value.clone() for name, value in model.state_dict().items()}
    state["lm_head.weight"] = state["model.embed_tokens.weight"] + 0.5
    checkpoint = root / "ckpt"
    save_dcp({"model": state}, checkpoint / "dist_ckpt")
    model.config.save_pretrained(checkpoint / "huggingface")
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(checkpoint / "huggingface")
    return checkpoint, checkpoint / "huggingface", table


def _error(code: int, stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1, stderr
    assert "--hf-config" not in errors[0], errors[0]
    return errors[0]


def test_the_checkpoints_own_tied_config_asks_for_model_hf_config(untied, tmp_path):
    checkpoint, _, table = untied
    error = _error(*train_from(checkpoint, table, tmp_path / "run"))
    assert error.endswith(
        "the checkpoint's own config says tie_word_embeddings=true;"
        " pass model.hf_config=DIR with tie_word_embeddings false"
    ), error


def test_a_tied_model_hf_config_is_named_as_given(untied, tmp_path):
    checkpoint, config, table = untied
    error = _error(
        *train(
            "sft",
            *(f"model.path={checkpoint}", f"model.hf_config={config}"),
            *(f"data.train_files={table}", f"trainer.run_dir={tmp_path / 'run'}"),
            *("trainer.total_steps=1", "trainer.eval_every=0", "checkpoint.save_every=0"),
        )
    )
    assert error.endswith(
        f"but model.hf_config={config} says tie_word_embeddings=true;"
        " give a config with tie_word_embeddings false"
    ), error
