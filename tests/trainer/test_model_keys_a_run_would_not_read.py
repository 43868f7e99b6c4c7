"""Model keys the run's model source would not read: `model.hf_config` beside a Hugging Face
model dir or without model.path trained another model than the one configured, with exit 0:
refused before launch (exit 2, one line naming the key). A named `model.shape` beside
model.path is told in one note and the run goes on (a named-shape run's saved config.yaml
names its shape, and resuming from that run's checkpoint sets model.path beside it). Where a
key is read (model.hf_config over a checkpoint's own huggingface/) the run goes on."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.model_dirs import train
from tests.support.paths import FIXTURES
from trainer.config import ModelConfig
from trainer.model_source import resolve_model_source

STEP = FIXTURES / "megatron_fsdp_qwen2" / "run" / "global_step_2"


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    """A Hugging Face model dir, its SFT table, and a config dir of another model."""
    from tests.support.model_dirs import trainable_model_dir

    root = tmp_path_factory.mktemp("unread")
    model, table = trainable_model_dir(root)
    other = root / "other"
    other.mkdir()
    shutil.copy(model / "config.json", other / "config.json")
    return {"MODEL": model, "TABLE": table, "OTHER": other, "RUN": root / "run"}


@pytest.mark.parametrize(
    "overrides, refusal",
    [
        (
            ["model.path=MODEL", "model.hf_config=OTHER"],
            "model.hf_config: OTHER would not be read: model.path MODEL is a Hugging Face model"
            " dir, whose own config.json is used",
        ),
        (
            ["model.path=MODEL", "model.random_init=true", "model.hf_config=OTHER"],
            "model.hf_config: OTHER would not be read: model.path MODEL is a Hugging Face model"
            " dir, whose own config.json is used",
        ),
        (
            ["model.hf_config=OTHER"],
            "model.hf_config: OTHER would not be read: without model.path the run builds"
            " model.shape tiny",
        ),
    ],
)
def test_a_key_the_model_source_would_not_read_is_refused_before_launch(dirs, overrides, refusal):
    def named(text: str) -> str:
        for key, value in dirs.items():
            text = text.replace(key, str(value))
        return text

    code, stderr = train(
        "sft",
        *(named(arg) for arg in overrides),
        named("data.train_files=TABLE"),
        named("trainer.run_dir=RUN"),
        "trainer.total_steps=1",
    )
    assert code == 2 and stderr.startswith(f"error: {named(refusal)}"), stderr
    assert stderr.count("\n") == 1, stderr
    assert not dirs["RUN"].exists()


def test_model_hf_config_over_a_checkpoints_own_huggingface_dir_is_read(dirs):
    source = resolve_model_source(ModelConfig(path=str(STEP), hf_config=str(dirs["OTHER"])))
    assert source is not None and source.checkpoint is not None
    assert source.assets == dirs["OTHER"] and source.assets_key == "model.hf_config"


def test_the_default_shape_beside_model_path_is_no_refusal(dirs):
    source = resolve_model_source(ModelConfig(path=str(dirs["MODEL"]), shape="tiny"))
    assert source is not None and source.assets == dirs["MODEL"]


def test_a_named_shape_beside_model_path_is_one_note_and_the_run_trains(dirs, tmp_path):
    """The run trains model.path's model; the note says the shape is not read, once (the
    launching process shows config notes, its ranks do not repeat them)."""
    code, stderr = train(
        "sft",
        f"model.path={dirs['MODEL']}",
        "model.shape=qwen2-0.5b",
        f"data.train_files={dirs['TABLE']}",
        f"trainer.run_dir={tmp_path / 'run'}",
        "trainer.total_steps=1",
    )
    assert code == 0, stderr
    note = "note: model.shape qwen2-0.5b is not read: the model's config comes from model.path"
    assert stderr.count(note) == 1, stderr
