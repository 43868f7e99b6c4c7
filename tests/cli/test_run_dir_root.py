"""`trainer.run_dir` must name a directory of the run's own. The file system's root (`/`,
`/tmp/..`) was a traceback from the run-dir lock (`PosixPath('/') has an empty name`), exit 1
and under --json nothing on stdout; an empty one trained into the current directory. Both
are refused before anything starts: one line naming trainer.run_dir, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.cli_errors import one_error
from tests.support.fresh_python import mfsdp
from tests.support.paths import EXAMPLES, REPO
from tests.support.sft import write_chat_jsonl
from trainer.config import ConfigError, SFTConfig
from trainer.grpo.config import GRPOConfig


@pytest.mark.parametrize("cls", [SFTConfig, GRPOConfig])
@pytest.mark.parametrize("run_dir", ["/", "//", "/.", "/tmp/..", "link-to-root"])
def test_the_root_directory_as_run_dir_is_refused(cls, run_dir, tmp_path, monkeypatch):
    from cli.launch import load_checked_config

    monkeypatch.chdir(tmp_path)
    os.symlink("/", tmp_path / "link-to-root")
    with pytest.raises(ConfigError) as caught:
        load_checked_config(cls, None, [f"trainer.run_dir={run_dir}"])
    named = os.path.normpath(run_dir) if ".." in run_dir else run_dir  # `..` taken away
    assert str(caught.value).startswith(f"trainer.run_dir: {named}")
    assert "the file system's root" in str(caught.value)


@pytest.mark.parametrize("cls", [SFTConfig, GRPOConfig])
@pytest.mark.parametrize("given", ["override", "file"])
def test_an_empty_run_dir_is_refused(cls, given, tmp_path, monkeypatch):
    from cli.launch import load_checked_config

    monkeypatch.chdir(tmp_path)
    config_file = tmp_path / "config.yaml"
    config_file.write_text('trainer:\n  run_dir: ""\n')
    with pytest.raises(ConfigError, match=r"^trainer\.run_dir: '' is empty; give the directory"):
        if given == "file":
            load_checked_config(cls, str(config_file), [])
        else:
            load_checked_config(cls, None, ["trainer.run_dir=''"])
    assert list(tmp_path.iterdir()) == [config_file]


def test_other_run_dirs_still_pass(tmp_path, monkeypatch):
    from cli.launch import load_checked_config

    monkeypatch.chdir(tmp_path)
    for run_dir in ("run", "./run", str(tmp_path / "a" / ".." / "run")):
        assert load_checked_config(SFTConfig, None, [f"trainer.run_dir={run_dir}"]).trainer.run_dir


@pytest.mark.parametrize("command", ["sft", "grpo"])
def test_train_into_the_root_is_one_line_exit_2_and_json_under_json(command, tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=48)
    config = str(EXAMPLES / f"{command}_tiny_cpu.yaml")
    for run_dir in ("/", "/tmp/.."):
        args = ["train", command, "--config", config, f"data.train_files={data}"]
        done = mfsdp(*args, f"trainer.run_dir={run_dir}", "--json")
        assert done.returncode == 2, done.stderr
        # `/tmp/..` is named without its `..`, as the run reads it
        line = one_error(done.stderr, "trainer.run_dir: / ", "the file system's root")
        assert json.loads(done.stdout) == {"error": line.removeprefix("error: "), "exit_code": 2}


def test_train_into_an_empty_run_dir_writes_nothing_in_the_current_directory(tmp_path):
    data = write_chat_jsonl(tmp_path / "data" / "train.jsonl", rows=48)
    here = tmp_path / "here"
    here.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", "train", "sft"]
        + ["--config", str(EXAMPLES / "sft_tiny_cpu.yaml"), f"data.train_files={data}"]
        + ["trainer.total_steps=1", "trainer.run_dir=''"],
        cwd=here,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    one_error(done.stderr, "trainer.run_dir: '' is empty")
    assert list(here.iterdir()) == []


@pytest.mark.parametrize("cls", [SFTConfig, GRPOConfig])
def test_a_hugging_face_model_dir_as_run_dir_is_refused(cls, tmp_path, monkeypatch):
    """A run trained into an export (runs/demo/hf): its steps among the model's files, which
    validate then read as a run, inspect and export-hf as a model."""
    from cli.launch import load_checked_config

    monkeypatch.chdir(tmp_path)
    model = tmp_path / "hf"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2"}')
    (model / "model.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError) as caught:
        load_checked_config(cls, None, [f"trainer.run_dir={model}"])
    assert str(caught.value) == (
        f"trainer.run_dir: {model} is a Hugging Face model dir (config.json and weights); give"
        " a directory of the run's own (e.g. trainer.run_dir=runs/NAME)"
    )
    assert sorted(p.name for p in model.iterdir()) == ["config.json", "model.safetensors"]


def _earlier_run(run_dir, steps):
    """A run dir as an earlier run left it: complete steps (a manifest each) and its tracker."""
    from mfsdp_ckpt.format import layout, step_saving

    for step in steps:
        (layout.step_dir(run_dir, step) / layout.DIST_CKPT_DIR).mkdir(parents=True)
        (layout.step_dir(run_dir, step) / layout.DIST_CKPT_DIR / ".metadata").write_bytes(b"saved")
        (layout.step_dir(run_dir, step) / layout.MANIFEST_FILE).write_text("{}")
    step_saving.write_tracker(run_dir, steps[-1])


@pytest.mark.parametrize("cls", [SFTConfig, GRPOConfig])
def test_starting_afresh_into_a_run_dir_with_checkpoints_is_refused(cls, tmp_path, monkeypatch):
    """checkpoint.resume=disable saved its steps beside the earlier run's (global_step_2
    beside 4 and 6) and a later resume=auto resumed from whichever was newest."""
    from cli.launch import load_checked_config

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    _earlier_run(run, [4, 6])
    with pytest.raises(ConfigError) as caught:
        load_checked_config(cls, None, [f"trainer.run_dir={run}", "checkpoint.resume=disable"])
    assert str(caught.value) == (
        f"trainer.run_dir: {run} holds an earlier run's checkpoints (step dirs here:"
        " global_step_4, global_step_6) and checkpoint.resume=disable starts afresh, which"
        " would mix this run's steps with them; give another trainer.run_dir, or"
        " checkpoint.resume=auto to continue that run"
    )
    load_checked_config(cls, None, [f"trainer.run_dir={run}", "checkpoint.resume=auto"])
    # going back to one of its steps would save over step 6: refused as the config loads,
    # with the line train gives at load
    from trainer.resume import NewerStepsError

    back = f"checkpoint.resume={run / 'global_step_4'}"
    with pytest.raises(NewerStepsError, match="holds its own steps after step 4"):
        load_checked_config(cls, None, [f"trainer.run_dir={run}", back])
    empty = tmp_path / "empty"
    empty.mkdir()
    load_checked_config(cls, None, [f"trainer.run_dir={empty}", "checkpoint.resume=disable"])


def test_a_torch_cache_dir_that_cannot_be_made_is_named(tmp_path, monkeypatch):
    """TORCHINDUCTOR_CACHE_DIR=/proc/x stopped every run, model.compile or not, with a bare
    "[Errno 2] No such file or directory: '/proc/x'" from inside `import transformers`."""
    from cli.launch import load_checked_config

    monkeypatch.chdir(tmp_path)
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(blocked / "cache"))
    with pytest.raises(ConfigError) as caught:
        load_checked_config(SFTConfig, None, [])
    assert str(caught.value) == (
        f"environment variable TORCHINDUCTOR_CACHE_DIR={blocked / 'cache'}: torch cannot"
        " create it (Not a directory); unset it or name a writable directory"
    )
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache" / "inductor"))
    load_checked_config(SFTConfig, None, [])
    assert (tmp_path / "cache" / "inductor").is_dir()
