"""RANK, LOCAL_RANK and LOCAL_WORLD_SIZE are read by one reader: an empty or non-integer
value (a job script's `export LOCAL_WORLD_SIZE=$SLURM_NTASKS_PER_NODE` with the variable
unset gives '') was `ValueError: invalid literal for int()` with a traceback; it is one line
naming the variable and its value, exit 2."""

from __future__ import annotations

import json
import sys

import pytest

from cli.main import main
from mfsdp_ckpt.errors import MfsdpUsageError
from trainer.distributed import init_distributed
from trainer.env_ints import env_int


@pytest.mark.parametrize("value", ["", "abc", " ", "1.5", "-1", "٣"])
def test_a_value_that_is_no_whole_number_is_named(monkeypatch, value):
    monkeypatch.setenv("LOCAL_RANK", value)
    with pytest.raises(MfsdpUsageError) as refused:
        env_int("LOCAL_RANK", 0)
    assert str(refused.value).startswith(f"environment variable LOCAL_RANK={value!r}: not a")


def test_unset_is_the_default_and_a_number_is_read(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert env_int("LOCAL_WORLD_SIZE", 1, minimum=1) == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", " 4 ")
    assert env_int("LOCAL_WORLD_SIZE", 1, minimum=1) == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "0")
    with pytest.raises(MfsdpUsageError, match="LOCAL_WORLD_SIZE='0': not a whole number >= 1"):
        env_int("LOCAL_WORLD_SIZE", 1, minimum=1)


def test_the_group_setup_names_a_bad_local_rank(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "x")
    with pytest.raises(MfsdpUsageError, match="environment variable LOCAL_RANK='x'"):
        init_distributed("cpu")


@pytest.mark.parametrize(("name", "value"), [("LOCAL_WORLD_SIZE", ""), ("RANK", "x")])
def test_the_train_command_says_it_in_one_line(tmp_path, monkeypatch, capsys, name, value):
    monkeypatch.chdir(tmp_path)
    rows = [{"prompt": f"{i} + 1 =", "response": f"{i + 1}"} for i in range(8)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setenv(name, value)
    if name == "RANK":  # RANK is read where the run joins a group: beside WORLD_SIZE
        monkeypatch.setenv("WORLD_SIZE", "1")
    argv = ["mfsdp", "train", "sft", "model.shape=tiny", "data.train_files=train.jsonl"]
    monkeypatch.setattr(sys, "argv", [*argv, "trainer.run_dir=run", "trainer.device=cpu"])
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err
    assert done.value.code == 2, err
    assert err.count("\n") == 1 and f"environment variable {name}={value!r}: not a" in err
