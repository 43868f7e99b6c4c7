"""A model dir holding config.json and weights but no tokenizer file, the tokenizer not
named by `model.tokenizer`: refused before anything starts (exit 2) naming the dir and
`model.tokenizer`; it failed once torch, transformers and the model had loaded (exit 1),
its tokenizer "turning text into no tokens". A checkpoint whose huggingface/ holds only
its config is refused alike; `model.tokenizer` lets both train."""

from pathlib import Path

import pytest

from tests.support.model_dirs import train_from, trainable_model_dir
from tests.support.paths import FIXTURES
from trainer.config import ConfigError, ModelConfig
from trainer.model_source import TOKENIZER_FILES, check_tokenizer_present, resolve_model_source

CHECKPOINT_RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"  # huggingface/: config.json alone


@pytest.fixture(scope="module")
def untokenized(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(a model dir without its tokenizer files, an SFT table, the tokenizer's own dir)."""
    root = tmp_path_factory.mktemp("untokenized")
    model, table = trainable_model_dir(root)
    tokenizer = root / "tokenizer"
    tokenizer.mkdir()
    for path in model.iterdir():
        if path.name not in ("config.json", "generation_config.json", "model.safetensors"):
            path.rename(tokenizer / path.name)
    return model, table, tokenizer


def test_training_refuses_it_before_loading_naming_model_tokenizer(untokenized, tmp_path):
    model, table, _ = untokenized
    code, err = train_from(model, table, tmp_path / "run")
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: model.path: {model} holds no tokenizer files"), err
    assert "model.tokenizer=DIR" in lines[0]
    assert "loading torch" not in err


def test_model_tokenizer_names_where_the_tokenizer_is(untokenized):
    model, _, tokenizer = untokenized
    cfg = ModelConfig(path=str(model), tokenizer=str(tokenizer))
    check_tokenizer_present(cfg, resolve_model_source(cfg))


@pytest.mark.parametrize("name", TOKENIZER_FILES)
def test_any_tokenizer_file_is_left_for_transformers_to_read(untokenized, tmp_path, name):
    """A dir with some tokenizer file is not refused here: transformers says what it lacks."""
    model, _, _ = untokenized
    copy = tmp_path / "model"
    copy.mkdir()
    for path in model.iterdir():
        (copy / path.name).symlink_to(path)
    (copy / name).write_text("{}")
    cfg = ModelConfig(path=str(copy))
    check_tokenizer_present(cfg, resolve_model_source(cfg))


def test_a_checkpoint_whose_huggingface_dir_has_no_tokenizer_is_refused_alike():
    cfg = ModelConfig(path=str(CHECKPOINT_RUN))
    with pytest.raises(ConfigError, match=r"^model\.path: .*/huggingface holds no tokenizer"):
        check_tokenizer_present(cfg, resolve_model_source(cfg))


def test_the_named_shapes_need_no_tokenizer_dir():
    cfg = ModelConfig(shape="tiny")
    check_tokenizer_present(cfg, resolve_model_source(cfg))
