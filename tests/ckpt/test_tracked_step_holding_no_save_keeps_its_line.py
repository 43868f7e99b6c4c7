"""A run dir whose tracker names a step dir holding no save (a Hugging Face model merged
into `global_step_500/`, a config.json alone, a PEFT adapter, verl's `actor/huggingface/`
with only its config or `actor/lora_adapter/` alone) was told "holds no .metadata, which a
save writes last: this save did not finish" (exit 1) through the tracker, while the same
step given directly keeps its own line (exit 2, `test_unfinished_step_only_of_a_save`).
Through the tracker it says that same line after the tracker naming it, exit as that line's;
an empty step dir the tracker names is still a save that did not finish (exit 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mfsdp_ckpt.format.layout import TRACKER_FILE
from tests.ckpt.test_unfinished_step_only_of_a_save import CONFIG, HOLDS, _fill
from tests.support.interop_layouts import run_cli


def _fill_verl(step: Path, holds: str) -> None:
    """verl's actor dir holding only its Hugging Face config, or only its LoRA adapter."""
    where = step / "actor" / ("huggingface" if holds == "actor-hf-config" else "lora_adapter")
    where.mkdir(parents=True)
    name = "config.json" if holds == "actor-hf-config" else "adapter_config.json"
    (where / name).write_text(json.dumps(CONFIG))


@pytest.mark.parametrize("holds", [*HOLDS, "actor-hf-config", "actor-lora-adapter"])
def test_a_tracked_step_holding_no_save_keeps_its_own_line(holds, tmp_path):
    run = tmp_path / "run"
    step = run / "global_step_500"
    (_fill_verl if holds.startswith("actor") else _fill)(step, holds)
    (run / TRACKER_FILE).write_text("500\n")
    for command in (["validate"], ["inspect"]):
        code, _, err = run_cli("ckpt", *command, step)
        via_code, _, via_err = run_cli("ckpt", *command, run)
        line = next(text for text in err.splitlines() if text.startswith("error: "))
        assert code == via_code == 2, via_err
        assert "did not finish" not in via_err
        assert f"error: {run / TRACKER_FILE} names '500', but {line[len('error: ') :]}" in (
            via_err.splitlines()
        ), via_err


def test_an_empty_tracked_step_is_still_a_save_that_did_not_finish(tmp_path):
    run = tmp_path / "run"
    (run / "global_step_500").mkdir(parents=True)
    (run / TRACKER_FILE).write_text("500\n")
    code, out, err = run_cli("ckpt", "validate", run)
    assert code == 1, err
    assert "this save did not finish" in out + err
