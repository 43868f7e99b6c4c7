"""`data.val_files: ""` is no validation files; an empty path in a list of files is bad usage.

verl users write `val_files: ""` for none. It was read as a file named "" and refused as
`data.val_files: : no such file or directory ... make it with mfsdp data gsm8k ...`: an empty
name, and advice to generate data. An empty path inside a list of files (`[a.jsonl, ""]`)
is a one-line usage error naming the key and saying the path is empty.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig

CONFIGS = [SFTConfig, GRPOConfig]


@pytest.mark.parametrize("cls", CONFIGS)
def test_empty_text_as_an_override_is_no_validation_files(cls):
    cfg = load_config(cls, None, ["data.train_files=/d/t.parquet", 'data.val_files=""'])
    assert cfg.data.val_files == []


@pytest.mark.parametrize("cls", CONFIGS)
@pytest.mark.parametrize("verl", [False, True])
def test_empty_text_in_a_file_is_no_validation_files(tmp_path, cls, verl):
    """In a file of mfsdp's keys, and in one read as verl's (a verl key in it)."""
    data = {"train_files": ["/d/t.parquet"], "val_files": ""}
    if verl:
        data["max_prompt_length" if cls is GRPOConfig else "micro_batch_size_per_gpu"] = 64
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"data": data}))
    assert load_config(cls, str(path)).data.val_files == []


@pytest.mark.parametrize("cls", CONFIGS)
@pytest.mark.parametrize(
    "override, said",
    [
        ("data.train_files=[/d/t.parquet,'']", "'data.train_files': item 2 is an empty path"),
        ('data.train_files=""', "'data.train_files' is an empty path; give a file"),
        ("data.val_files=['']", "'data.val_files': item 1 is an empty path"),
    ],
)
def test_an_empty_path_in_a_list_of_files_is_named(cls, override, said):
    given = [] if override.startswith("data.train_files") else ["data.train_files=/d/t.parquet"]
    with pytest.raises(ConfigError) as error:
        load_config(cls, None, [*given, override])
    assert said in str(error.value) and "\n" not in str(error.value), error.value


@pytest.mark.parametrize("command", ["sft", "grpo"])
def test_the_command_line_says_it_in_one_line_exit_2(tmp_path, command):
    done = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "config", "check", command]
        + ["model.shape=tiny", "data.train_files=[t.jsonl,'']"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "error: command-line override: config key 'data.train_files': item 2 is an empty path;"
        " give a file, or leave the item out"
    ], done.stderr
