"""Training refuses, before it starts, a model dir or checkpoint whose JSON asset its reader
cannot read: a tokenizer.json nested past MAX_JSON_DEPTH, or a generation_config.json
transformers refuses (`max_new_tokens: -5`), one line naming the file (exit 2).

Was: a generation_config.json of `max_new_tokens: -5` in a model dir failed as the model
was built, blamed on config.json (`gen/config.json: transformers cannot build the model
from it`); in a checkpoint's huggingface/ it was trained from and copied into each new
checkpoint, whose exports then did not load."""

from __future__ import annotations

import shutil

import pytest

from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.model_dirs import train_from
from trainer.config import ModelConfig
from trainer.model import ModelFilesError, _built_by_transformers
from trainer.model_source import ModelSource

GENERATION = "generation_config.json"
BAD_GENERATION = '{"eos_token_id": "abc", "max_new_tokens": -5}'
SAYS = "`max_new_tokens` must be greater than 0"


def test_a_bad_generation_config_in_a_model_dir_is_named(tmp_path, trainable):
    source, table = trainable
    model = shutil.copytree(source, tmp_path / "gen")
    (model / GENERATION).write_text(BAD_GENERATION)
    code, err = train_from(model, table, tmp_path / "run")
    assert code == 2, err
    one_error(err, str(model / GENERATION), SAYS)
    assert "config.json:" not in err.replace(f"{GENERATION}:", "")


def test_a_bad_generation_config_in_a_checkpoint_is_not_trained_from(tmp_path, trainable):
    source, table = trainable
    run = tmp_path / "imported"
    code, _out, err = run_cli("ckpt", "import-hf", source, "--out", run, "--layout", "hf")
    assert code == 0, err
    copied = run / "global_step_0" / "huggingface" / GENERATION
    copied.write_text(BAD_GENERATION)
    code, err = train_from(run, table, tmp_path / "run")
    assert code == 2, err
    one_error(err, str(copied), SAYS)


def test_a_tokenizer_json_nested_too_deep_is_not_trained_from(tmp_path, trainable):
    source, table = trainable
    model = shutil.copytree(source, tmp_path / "deep")
    (model / "tokenizer.json").write_text('{"x":' + "[" * 200_000 + "]" * 200_000 + "}")
    code, err = train_from(model, table, tmp_path / "run")
    assert code == 2, err
    one_error(err, str(model / "tokenizer.json"), "nested too deeply")


def test_a_build_failing_on_the_generation_config_names_it(tmp_path):
    """Should transformers refuse a generation config the check took, the build's error
    names that file, not config.json."""
    from transformers import GenerationConfig

    source = ModelSource(assets=tmp_path, checkpoint=None)

    def build() -> None:
        GenerationConfig.from_dict({"max_new_tokens": -5})

    with pytest.raises(ModelFilesError) as raised:
        _built_by_transformers(ModelConfig(), source, build)
    assert str(raised.value).startswith(f"{tmp_path / GENERATION}: "), raised.value
