"""`mfsdp ckpt import-hf` given a LoRA step whose base was a random init (the step, its
huggingface/, its dist_ckpt/ or its run) names ways on that work: resuming the run, or the
adapter-only export. A step on a base model dir is still sent to the merged export.

Was: every one advised `mfsdp ckpt export-hf STEP --out DIR`, which then failed ("the base
model was a random init: there is nothing to merge onto"). Each `mfsdp ckpt export-hf`
command a refusal names is run here as given.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mfsdp_ckpt.format.lora_fields import BaseModelRecord, base_weights_dir
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft
from trainer.tiny import build_tiny_model_dir

LORA = ("model.lora_rank=4", "model.lora_alpha=8", "data.global_batch_size=4")
GIVEN = {  # what import-hf is given, as a path under a run dir
    "step": "global_step_1",
    "its huggingface dir": "global_step_1/huggingface",
    "its dist_ckpt": "global_step_1/dist_ckpt",
    "the run": ".",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """One-step SFT LoRA runs: on the tiny shape's random init (random/), and on a model
    dir (real/)."""
    root = tmp_path_factory.mktemp("lora_runs")
    data = write_chat_jsonl(root / "train.jsonl", rows=8)
    run_sft(tiny_config(data, root / "random", *LORA, "trainer.total_steps=1"))
    base = build_tiny_model_dir(root / "base", with_weights=True)
    run_sft(tiny_config(data, root / "real", *LORA, "trainer.total_steps=1", f"model.path={base}"))
    return root


def _refusal(given: Path, tmp_path: Path) -> str:
    code, _out, err = run_cli("ckpt", "import-hf", given, "--out", tmp_path / "imported")
    assert code == 2, err
    return one_error(err)


def _exports_named(line: str) -> list[str]:
    return re.findall(r"`mfsdp (ckpt export-hf [^`]+)`", line)


def _run_each(commands: list[str], tmp_path: Path) -> None:
    for number, command in enumerate(commands):
        args = command.replace("DIR", str(tmp_path / f"exported{number}")).split()
        code, stdout, err = run_cli(*args)
        assert code == 0, f"{command}: {stdout}{err}"


@pytest.mark.parametrize("given", sorted(GIVEN))
def test_a_step_on_a_random_init_is_sent_to_what_works(runs, tmp_path, given):
    line = _refusal(runs / "random" / GIVEN[given], tmp_path)
    assert "LoRA adapter on a random-init base" in line, line
    assert "trainer.run_dir" in line, line
    commands = _exports_named(line)
    assert commands and all(c.endswith("--adapter-only") for c in commands), line
    _run_each(commands, tmp_path)


def test_a_step_on_a_model_dir_is_still_sent_to_the_merged_export(runs, tmp_path):
    step = runs / "real" / "global_step_1"
    line = _refusal(step / "huggingface", tmp_path)
    commands = _exports_named(line)
    assert commands == [f"ckpt export-hf {step} --out DIR"], line
    _run_each(commands, tmp_path)


def test_which_bases_have_weights_on_disk():
    """A merged export reads the base dir a record names; a random init, or no record, has
    none (the merge refuses those)."""
    assert base_weights_dir(BaseModelRecord("/models/base", False, 0)) == "/models/base"
    assert base_weights_dir(BaseModelRecord("/models/base", True, 0)) is None
    assert base_weights_dir(BaseModelRecord(None, True, 0)) is None
    assert base_weights_dir(BaseModelRecord(None, False, None)) is None
    assert base_weights_dir(None) is None
