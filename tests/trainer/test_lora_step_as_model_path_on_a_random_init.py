"""`model.path=` an mfsdp LoRA step whose base was a random init says there are no weights
to start from, and every way on it names works.

Was: the refusal advised `mfsdp ckpt export-hf STEP --out DIR` (the merged export), which
then failed ("the base model was a random init: there is nothing to merge onto"); the
docs/lora.md GRPO recipe makes exactly such a step. Now it names resuming the run and the
adapter-only export, and this test follows each command it gives.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.sft import TINY_CONFIG, tiny_config, write_chat_jsonl
from trainer.config import ConfigError, ModelConfig
from trainer.model_source import resolve_model_source
from trainer.sft import run_sft

LORA = ("model.lora_rank=4", "model.lora_alpha=8", "data.global_batch_size=4")


@pytest.fixture(scope="module")
def random_run(tmp_path_factory) -> Path:
    """A one-step SFT LoRA run on the tiny shape's random init (no model.path)."""
    root = tmp_path_factory.mktemp("lora_random_init")
    data = write_chat_jsonl(root / "train.jsonl", rows=8)
    run_sft(tiny_config(data, root / "run", *LORA, "trainer.total_steps=1"))
    return root


def _refusal(path: Path) -> str:
    with pytest.raises(ConfigError) as refused:
        resolve_model_source(ModelConfig(path=str(path)))
    return str(refused.value)


def test_the_refusal_says_the_base_was_a_random_init(random_run):
    step = random_run / "run" / "global_step_1"
    assert _refusal(step) == (
        f"model.path: {step} is an mfsdp LoRA checkpoint (the adapter alone) whose base model"
        " was a random init: there are no weights to start from; to go on training it, give"
        " its run dir as trainer.run_dir (it resumes); for the adapter alone, `mfsdp ckpt"
        f" export-hf {step} --out DIR --adapter-only`"
    )


def test_train_sft_exits_2_with_that_line(random_run, tmp_path):
    step = random_run / "run" / "global_step_1"
    code, _out, err = run_cli(
        *("train", "sft", "--config", TINY_CONFIG, f"model.path={step}"),
        *(f"data.train_files={random_run / 'train.jsonl'}", f"trainer.run_dir={tmp_path}/r"),
    )
    line = one_error_line(err)
    assert code == 2 and "base model was a random init: there are no weights" in line, err


def test_every_export_it_advises_works(random_run, tmp_path):
    """Each `mfsdp ckpt export-hf ...` the refusal names runs (exit 0) as given."""
    step = random_run / "run" / "global_step_1"
    commands = re.findall(r"`mfsdp (ckpt export-hf [^`]+)`", _refusal(step))
    assert commands, "no export named"
    for number, command in enumerate(commands):
        args = command.replace("DIR", str(tmp_path / f"out{number}")).split()
        code, stdout, err = run_cli(*args)
        assert code == 0, f"{command}: {stdout}{err}"


def test_resuming_the_run_it_names_works(random_run, tmp_path):
    """`trainer.run_dir` of the step's run (a copy here) goes on from it."""
    run = shutil.copytree(random_run / "run", tmp_path / "run")
    run_sft(tiny_config(random_run / "train.jsonl", run, *LORA, "trainer.total_steps=2"))
    assert (run / "global_step_2").is_dir()
