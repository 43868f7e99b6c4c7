"""A LoRA step resumed by the other kind of run is refused with advice that works.

Was: `mfsdp train sft` into a GRPO LoRA run whose base was a random init suggested
`mfsdp ckpt export-hf STEP --out DIR`, which then failed ("the base model was a random
init: there is nothing to merge onto"). Now such a step says it holds no weights to start
from; a LoRA step on a real base keeps the export advice, which this test follows.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.grpo.runner import GRPO_RUN
from trainer.resume import ResumeMismatchError, check_run_kind
from trainer.sft import run_sft

LORA = ("model.lora_rank=4", "model.lora_alpha=8", "data.global_batch_size=4")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """One-step SFT LoRA runs: on a base model dir (real/), and on a random init (random/)."""
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("lora_kinds")
    base = build_tiny_model_dir(root / "base", seed=0, with_weights=True)
    data = write_chat_jsonl(root / "train.jsonl", rows=8)
    run_sft(tiny_config(data, root / "real", f"model.path={base}", *LORA, "trainer.total_steps=1"))
    run_sft(tiny_config(data, root / "random", *LORA, "trainer.total_steps=1"))
    return root


def _advice(run: Path) -> str:
    with pytest.raises(ResumeMismatchError) as refused:
        check_run_kind(resolve_checkpoint(run), "auto", GRPO_RUN)
    return str(refused.value)


def test_a_lora_step_on_a_real_base_is_told_to_export_and_the_export_works(runs, tmp_path):
    step = runs / "real" / "global_step_1"
    advice = _advice(runs / "real")
    found = re.search(r"give `(mfsdp ckpt export-hf \S+ --out DIR)`, then model\.path=DIR", advice)
    assert found and found.group(1) == f"mfsdp ckpt export-hf {step} --out DIR", advice
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", step, "--out", out)
    assert code == 0, stdout + err
    assert (out / "config.json").is_file()


def test_a_lora_step_on_a_random_init_is_told_there_is_nothing_to_start_from(runs, tmp_path):
    step = runs / "random" / "global_step_1"
    assert _advice(runs / "random") == (
        f"{step}: `mfsdp train sft` wrote this checkpoint; `mfsdp train grpo` does not resume"
        " its step and optimizer state as its own, and it holds a LoRA adapter on a"
        " random-init base: no weights to start from (export-hf has nothing to merge it"
        " onto); give a new trainer.run_dir"
    )
    code, stdout, err = run_cli("ckpt", "export-hf", step, "--out", tmp_path / "hf")
    assert code != 0 and "nothing to merge onto" in one_error_line(err), stdout + err
