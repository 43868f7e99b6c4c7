"""A step dir given directly is called a save that did not finish only where it is one, and
saying so stays cheap in a run of thousands of steps.

- A dir named like a step (`global_step_500/`, `release/`) that holds a Hugging Face model,
  a PEFT adapter, a config.json alone or unrelated files is no save: it keeps the line and
  exit status (2) its own route gives it under any other name. It was "holds no .metadata,
  which a save writes last: this save did not finish" (exit 1), which sent a user who had
  merged a model into `global_step_500/` looking for a save never made.
- The other step dirs that line names are the newest few, judged alone: each sibling was
  listed and stat'ed (20,000 verl steps: minutes), and a dir not named as a step had its
  parent listed and judged. What is looked at on disk no longer grows with the run.
- `model.path=RUN/global_step_N` naming such a save says the key, exit 1 as
  `checkpoint.resume=` of the same dir: the line had lost its `model.path:`.
"""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

import pytest

from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from mfsdp_ckpt.format.layout import IncompleteCheckpointError
from tests.support.interop_layouts import run_cli
from trainer.config import ModelConfig
from trainer.model_source import resolve_model_source
from trainer.resume_key import check_resume_path

CONFIG = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 32}
ADAPTER = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}


def _fill(directory: Path, holds: str) -> None:
    """`directory` made holding what `holds` names: no save of any layout."""
    import torch
    from safetensors.torch import save_file

    directory.mkdir(parents=True)
    if holds in ("hf-model", "config-only"):
        (directory / "config.json").write_text(json.dumps(CONFIG))
    if holds == "hf-model":
        save_file(
            {"model.embed_tokens.weight": torch.zeros(32, 4)}, directory / "model.safetensors"
        )
    if holds == "peft-adapter":
        (directory / "adapter_config.json").write_text(json.dumps(ADAPTER))
        save_file({"x": torch.zeros(2)}, directory / "adapter_model.safetensors")
    if holds == "readme":
        (directory / "README.md").write_text("notes\n")


HOLDS = ["hf-model", "config-only", "peft-adapter", "readme"]
COMMANDS = [["inspect"], ["validate"], ["validate", "--json"], ["export-hf", "--out"]]


@pytest.mark.parametrize("name", ["global_step_500", "release"])
@pytest.mark.parametrize("holds", HOLDS)
def test_a_step_named_dir_holding_no_save_keeps_its_own_line(holds, name, tmp_path):
    run, plain = tmp_path / "run", tmp_path / "plain" / "model500"
    (run / "global_step_400").mkdir(parents=True)  # a step beside it, that the line would name
    _fill(run / name, holds)
    _fill(plain, holds)
    for command in COMMANDS:
        out = [tmp_path / "hf"] if command[0] == "export-hf" else []
        said = run_cli("ckpt", *command, run / name, *out)
        told = run_cli("ckpt", *command, plain, *out)
        assert said[0] == told[0] == 2, said
        assert said[1:] == tuple(text.replace(str(plain), str(run / name)) for text in told[1:])


def _counted(monkeypatch) -> collections.Counter:
    """The directory listings and stats this process makes, counted as they go on to run."""
    calls: collections.Counter = collections.Counter()
    for name in ("stat", "lstat", "listdir", "scandir"):
        real = getattr(os, name)

        def counting(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(os, name, counting)
    return calls


def _looked_at(run: Path, given: Path, monkeypatch) -> tuple[int, str]:
    """What reading `given` (a dir of `run`) costs in listings and stats, and its line."""
    with monkeypatch.context() as patched:
        calls = _counted(patched)
        with pytest.raises(MfsdpError) as refused:
            resolve_checkpoint(given)
    return sum(calls.values()), str(refused.value)


@pytest.mark.parametrize("given", ["global_step_{n}", "notes"])
def test_the_work_done_does_not_grow_with_the_steps_beside(given, tmp_path, monkeypatch):
    costs = []
    for count in (20, 3000):
        run = tmp_path / str(count)
        for step in range(count):
            (run / f"global_step_{step}").mkdir(parents=True)
        target = run / given.format(n=count)
        target.mkdir()
        cost, line = _looked_at(run, target, monkeypatch)
        costs.append(cost)
        if given != "notes":
            newest = ", ".join(
                f"global_step_{s} (a save that did not finish)" for s in range(count - 8, count)
            )
            assert line == (
                f"{target}: empty, no .metadata: this save did not finish or wrote nothing"
                f" (other step dirs here: (+{count - 8} older) {newest})"
            )
    assert costs[1] == costs[0], costs


def test_model_path_naming_an_unfinished_save_says_the_key(tmp_path):
    run = tmp_path / "run"
    (run / "global_step_40").mkdir(parents=True)
    step = run / "global_step_42"
    step.mkdir()
    with pytest.raises(IncompleteCheckpointError) as read:
        resolve_checkpoint(step)
    with pytest.raises(IncompleteCheckpointError) as as_model:
        resolve_model_source(ModelConfig(path=str(step)))
    with pytest.raises(IncompleteCheckpointError) as as_resume:
        check_resume_path(str(tmp_path / "new"), str(step))
    assert str(as_model.value) == f"model.path: {read.value}"
    assert str(as_resume.value) == f"checkpoint.resume: {read.value}"
    assert as_model.value.exit_code == as_resume.value.exit_code == 1
