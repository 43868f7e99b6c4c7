"""A Megatron-Bridge step without run_config.yaml (a save stopped after its trackers):
export-hf named the missing file and the sibling step holding one, while validate warned
"no Hugging Face config ... (pass --hf-config DIR)" as for any layout and inspect said
nothing of it. Now validate warns and inspect's model line says export-hf's words (one
line, `bridge_run_config.missing_run_config`), sibling included."""

from __future__ import annotations

import json
import shutil

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import bridge_run


def _stopped_before_run_config(tmp_path):
    """A Bridge run of steps 10 and 20 whose step 20 (tracked) holds no run_config.yaml
    and no tokenizer/, as a save stopped after its trackers leaves it."""
    run = bridge_run(tmp_path, tiny_causal_lm("qwen2", vocab=64))
    newest = run / "iter_0000020"
    (newest / "run_config.yaml").unlink()
    shutil.rmtree(newest / "tokenizer")
    return run, newest


def _export_line(run, tmp_path) -> str:
    """export-hf's refusal, less `error: STEP: ` and the weights summary after the remedy."""
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    assert code == 2, stdout + err
    line = one_error_line(err)
    return line.split(": ", 2)[2].split(" (config.json, and tokenizer files")[0]


def test_validate_and_inspect_say_what_export_says(tmp_path):
    run, newest = _stopped_before_run_config(tmp_path)
    said = _export_line(run, tmp_path)
    assert f"copy {run / 'iter_0000010' / 'run_config.yaml'}" in said, said
    code, stdout, err = run_cli("ckpt", "validate", run, "--json")
    report = json.loads(stdout)
    assert code == 0 and report["verdict"] == "valid", stdout + err
    (finding,) = report["findings"]
    assert finding["severity"] == "warning" and finding["where"] == str(newest), finding
    assert said in finding["message"] and "weight shapes not checked" in finding["message"]

    code, stdout, err = run_cli("ckpt", "inspect", run)
    assert code == 0, stdout + err
    (model,) = [line for line in stdout.splitlines() if line.startswith("model ")]
    assert f"{newest}: {said}" in model, model


def test_without_a_sibling_only_hf_config_is_named_alike(tmp_path):
    run, newest = _stopped_before_run_config(tmp_path)
    (run / "iter_0000010" / "run_config.yaml").unlink()
    said = _export_line(run, tmp_path)
    assert "copy " not in said, said
    code, stdout, err = run_cli("ckpt", "validate", newest)
    assert code == 0 and f"warning: {newest}: {said}" in stdout, stdout + err
    code, stdout, err = run_cli("ckpt", "inspect", newest, "--json")
    assert code == 0 and said in json.loads(stdout)["recorded_model"]["problem"], stdout


def test_a_step_with_its_run_config_says_none_of_it(tmp_path):
    run = bridge_run(tmp_path, tiny_causal_lm("qwen2", vocab=64))
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 0 and "without run_config.yaml" not in stdout + err, stdout + err
    code, stdout, err = run_cli("ckpt", "inspect", run)
    assert code == 0 and "without run_config.yaml" not in stdout, stdout
