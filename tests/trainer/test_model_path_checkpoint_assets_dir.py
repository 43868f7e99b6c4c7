"""`model.path` naming a checkpoint's huggingface/ dir (its config and tokenizer; the
weights are in the checkpoint's DCP files) names the checkpoint to give instead: it was
told to set model.random_init=true, which trains from random weights."""

import pytest

from tests.support.paths import FIXTURES
from trainer.config import ConfigError, ModelConfig
from trainer.model_source import resolve_model_source

STEP = FIXTURES / "megatron_fsdp_qwen2" / "run" / "global_step_2"


def test_a_steps_huggingface_dir_names_the_step():
    with pytest.raises(ConfigError) as raised:
        resolve_model_source(ModelConfig(path=str(STEP / "huggingface")))
    message = str(raised.value)
    assert message.startswith(f"model.path: {STEP / 'huggingface'} holds the config and"), message
    assert message.endswith(f"give model.path={STEP}") and "random_init" not in message


def test_a_model_dir_without_weights_still_suggests_random_init(tmp_path):
    (tmp_path / "config.json").write_bytes((STEP / "huggingface" / "config.json").read_bytes())
    with pytest.raises(ConfigError, match=r"set model\.random_init=true"):
        resolve_model_source(ModelConfig(path=str(tmp_path)))
