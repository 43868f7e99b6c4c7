"""A URL in any path key of a training config is refused before launch, naming the key (exit
2): `trainer.run_dir=gs://bucket/run1` trained into the relative `./gs:/bucket/run1` and
exited 0 reporting the checkpoint `gs:/bucket/run1/global_step_1`, so a user who took it for
saved to the bucket lost it with the machine; `file://` URLs and verl's `hdfs://` model
paths in the other keys were "does not exist" with no word about the URL."""

from __future__ import annotations

import pytest

from tests.support.fresh_python import mfsdp
from tests.support.paths import REPO
from tests.support.sft import write_chat_jsonl
from trainer.config import ConfigError, SFTConfig, load_config, path_values
from trainer.grpo.config import GRPOConfig
from trainer.local_paths import check_no_variables

CONFIGS = [SFTConfig, GRPOConfig]


def _path_keys(cls: type) -> list[tuple[str, bool]]:
    """(key, holds a list) of every path key of `cls`'s config."""
    return [(key, isinstance(value, list)) for key, value in path_values(load_config(cls))]


def _refusal(cls: type, key: str, is_list: bool, url: str) -> str:
    value = f"[{url}]" if is_list else url
    with pytest.raises(ConfigError) as caught:
        check_no_variables(load_config(cls, None, [f"{key}={value}"]))
    return str(caught.value)


@pytest.mark.parametrize("cls", CONFIGS)
@pytest.mark.parametrize("url", ["gs://bucket/x", "hdfs://nn/models/x", "S3://bucket/x"])
def test_a_remote_url_in_every_path_key_is_refused_naming_the_key(cls, url):
    for key, is_list in _path_keys(cls):
        message = _refusal(cls, key, is_list, url)
        advice = "write locally, then copy" if key == "trainer.run_dir" else "copy it locally"
        assert message.startswith(f"{key}: {url}: a URL; mfsdp trains from and into local"), key
        assert advice in message and "\n" not in message, message


@pytest.mark.parametrize("cls", CONFIGS)
@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("file:///abs/x", "/abs/x"),
        ("file:/abs/x", "/abs/x"),
        ("FILE:///abs/x", "/abs/x"),
        ("file://localhost/abs/x", "/abs/x"),
        ("file:///abs/sp%20ace", "/abs/sp ace"),
    ],
)
def test_a_file_url_in_every_path_key_names_its_local_path(cls, url, local):
    for key, is_list in _path_keys(cls):
        message = _refusal(cls, key, is_list, url)
        assert message == f"{key}: {url}: a file:// URL; give the local path itself, {local}"


def test_a_file_url_of_another_host_is_no_local_path():
    message = _refusal(SFTConfig, "model.path", False, "file://otherhost/x")
    assert message.startswith("model.path: file://otherhost/x: a file:// URL of the host")
    assert "not a path on this machine" in message


@pytest.mark.parametrize("path", ["run:1/x", "C:/x", "x:/g2", "./a://b", "gs:/bucket/x"])
def test_a_local_name_with_a_colon_stays_a_path(path):
    check_no_variables(load_config(SFTConfig, None, [f"trainer.run_dir={path}"]))


def test_training_into_a_url_writes_nothing_and_exits_2(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=8)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    done = mfsdp(
        "train",
        "sft",
        "--config",
        str(REPO / "examples/sft_tiny_cpu.yaml"),
        f"data.train_files=[{data}]",
        "data.val_ratio=0",
        "trainer.eval_every=0",
        "trainer.total_steps=1",
        "trainer.run_dir=gs://bucket/run1",
        cwd=cwd,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == (
        "error: trainer.run_dir: gs://bucket/run1: a URL; mfsdp trains from and into local"
        " paths: write locally, then copy\n"
    )
    assert list(cwd.iterdir()) == []  # no ./gs:/bucket/run1
