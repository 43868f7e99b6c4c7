"""A Megatron-Bridge step without run_config.yaml (Bridge writes it after its trackers: a run
stopped in between leaves a tracked step without it). export-hf refused it in Megatron-LM's,
the HF Trainer's and verl's words ("the checkpoint holds no Hugging Face config (Megatron-LM
saves none ...)"), naming neither the missing file nor the step beside it that has one.
Now the line says what is missing and why, names the newest sibling's run_config.yaml
(copied in, the export runs) and --hf-config; only the newest few siblings are looked at."""

from __future__ import annotations

import shutil

from mfsdp_ckpt.format.bridge_run_config import SIBLINGS_LOOKED_AT, sibling_run_config
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import assert_exports_to_source, one_error_line, run_cli
from tests.support.megatron_checkpoints import bridge_run

_STOPPED = "(Bridge writes it after its trackers: this save stopped before it)"


def _stopped_before_run_config(tmp_path):
    """A Bridge run of steps 10 and 20 whose step 20 (tracked) holds no run_config.yaml and
    no tokenizer/, as a save stopped after its trackers leaves it."""
    model = tiny_causal_lm("qwen2", vocab=64)
    run = bridge_run(tmp_path, model)
    newest = run / "iter_0000020"
    (newest / "run_config.yaml").unlink()
    shutil.rmtree(newest / "tokenizer")
    return model, run, newest


def test_export_names_the_missing_run_config_and_the_sibling_holding_one(tmp_path):
    _, run, newest = _stopped_before_run_config(tmp_path)
    sibling = run / "iter_0000010" / "run_config.yaml"
    for given in (run, newest):
        code, stdout, err = run_cli("ckpt", "export-hf", given, "--out", tmp_path / "out")
        assert code == 2, stdout + err
        line = one_error_line(err)
        assert line.startswith(f"error: {newest}: a Megatron-Bridge step without run_config.yaml")
        assert _STOPPED in line and f"copy {sibling}" in line and "--hf-config" in line, line
        assert "Megatron-LM saves none" not in line, line


def test_the_sibling_run_config_copied_in_exports_the_step(tmp_path):
    model, run, newest = _stopped_before_run_config(tmp_path)
    shutil.copy2(run / "iter_0000010" / "run_config.yaml", newest / "run_config.yaml")
    assert_exports_to_source(model, run, tmp_path / "out")


def test_without_a_sibling_holding_one_only_hf_config_is_named(tmp_path):
    _, run, newest = _stopped_before_run_config(tmp_path)
    (run / "iter_0000010" / "run_config.yaml").unlink()
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    assert code == 2, stdout + err
    line = one_error_line(err)
    assert line.startswith(f"error: {newest}: ") and _STOPPED in line, line
    assert "--hf-config" in line and "copy " not in line, line


def test_only_the_newest_siblings_are_looked_at(tmp_path):
    run = tmp_path / "run"
    steps = [run / f"iter_{step:07d}" for step in range(1, SIBLINGS_LOOKED_AT + 3)]
    for step in steps:
        step.mkdir(parents=True)
    (steps[0] / "run_config.yaml").write_text("model: {}\n")  # older than the newest few
    assert sibling_run_config(steps[-1]) is None
    (steps[2] / "run_config.yaml").write_text("model: {}\n")
    (steps[3] / "run_config.yaml").write_text("model: {}\n")
    assert sibling_run_config(steps[-1]) == steps[3] / "run_config.yaml"
