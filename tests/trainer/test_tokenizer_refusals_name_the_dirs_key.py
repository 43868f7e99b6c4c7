"""A refusal about the tokenizer a run would load names the key whose dir holds it. It named
`model.hf_config` whenever that key was set, though a Hugging Face model dir given as
`model.path` is read without it: the dir named was model.path's. The chat-template refusal
named `model.path` for the tokenizer of a `model.hf_config` dir."""

from pathlib import Path

import pytest

from tests.support.model_dirs import drop_chat_template, trainable_model_dir
from tests.support.paths import FIXTURES
from trainer.config import ConfigError, ModelConfig
from trainer.model import load_tokenizer
from trainer.model_source import check_tokenizer_present, resolve_model_source

CHECKPOINT_RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"  # huggingface/: config.json alone


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> tuple[Path, Path]:
    """(a model dir with its tokenizer, a copy of it without the tokenizer's files)."""
    root = tmp_path_factory.mktemp("model_dirs")
    model, _ = trainable_model_dir(root)
    bare = root / "bare"
    bare.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        (bare / name).symlink_to(model / name)
    return model, bare


def _refusal(cfg: ModelConfig) -> str:
    with pytest.raises(ConfigError) as caught:
        check_tokenizer_present(cfg, resolve_model_source(cfg))
    return str(caught.value)


def test_a_model_dir_without_tokenizer_is_named_as_model_path(model_dirs):
    _, bare = model_dirs
    refusal = _refusal(ModelConfig(path=str(bare)))
    assert refusal.startswith(f"model.path: {bare} holds no tokenizer files"), refusal


def test_a_model_hf_config_dir_without_tokenizer_is_named_as_model_hf_config(model_dirs):
    _, bare = model_dirs
    refusal = _refusal(ModelConfig(path=str(CHECKPOINT_RUN), hf_config=str(bare)))
    assert refusal.startswith(f"model.hf_config: {bare} holds no tokenizer files"), refusal


def test_a_tokenizer_without_chat_template_is_named_by_the_key_of_its_dir(model_dirs, tmp_path):
    model, _ = model_dirs
    plain = tmp_path / "plain"
    plain.mkdir()
    for path in model.iterdir():
        (plain / path.name).write_bytes(path.read_bytes())
    drop_chat_template(plain)
    with pytest.raises(ConfigError) as caught:
        load_tokenizer(ModelConfig(path=str(CHECKPOINT_RUN), hf_config=str(plain)))
    assert str(caught.value).startswith(f"model.hf_config: the tokenizer in {plain} has no chat")
    with pytest.raises(ConfigError) as caught:
        load_tokenizer(ModelConfig(path=str(plain)))
    assert str(caught.value).startswith(f"model.path: the tokenizer in {plain} has no chat")
