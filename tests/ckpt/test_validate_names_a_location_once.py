"""A finding names its file once, whatever the file's path holds.

Each check that caught an error dropped the location the message starts with by cutting at
its first ": ": a --hf-config dir named "bad: cfg" was cut inside its own name, and the
line read "error: bad: cfg/config.json: cfg/config.json: transformers cannot load it". The
exact prefix is dropped now (`ValidationReport.add_error`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mfsdp_ckpt.check.report import ValidationReport, without_location
from mfsdp_ckpt.check.validate import validate_checkpoint


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.support.export import save_single_process_checkpoint
    from trainer.tiny import build_tiny_model_dir

    base = tmp_path_factory.mktemp("names_once")
    run = base / "run"
    save_single_process_checkpoint(run, build_tiny_model_dir(base / "assets"))
    return run


def _errors(report: ValidationReport) -> list[str]:
    return [str(f) for f in report.findings if f.severity == "error"]


@pytest.mark.parametrize("name", ["plain", "bad: cfg", "x: y: z"])
def test_a_hf_config_dir_holding_a_colon_is_named_once(run, tmp_path, name):
    own = json.loads((run / "global_step_1" / "huggingface" / "config.json").read_text())
    given = tmp_path / name
    given.mkdir()
    layers = own["num_hidden_layers"]
    config = {**own, "layer_types": ["full_attention"] * (layers + 4)}
    (given / "config.json").write_text(json.dumps(config))
    errors = _errors(validate_checkpoint(run, deep=True, hf_config=given))
    assert errors, errors
    said = f"error: {given / 'config.json'}: transformers cannot load it ("
    assert errors[0].startswith(said), errors
    assert all(line.count("config.json") == 1 for line in errors), errors


def test_a_damaged_manifest_in_a_dir_holding_a_colon_is_named_once(tmp_path):
    from tests.support.export import save_single_process_checkpoint
    from trainer.tiny import build_tiny_model_dir

    run = tmp_path / "a: b" / "run"
    save_single_process_checkpoint(run, build_tiny_model_dir(tmp_path / "assets"))
    manifest = run / "global_step_1" / "manifest.json"
    manifest.write_text("{not json")
    errors = _errors(validate_checkpoint(run / "global_step_1"))
    mine = [line for line in errors if line.startswith(f"error: {manifest}: ")]
    assert len(mine) == 1, errors
    assert mine[0].count("manifest.json") == 1 and mine[0].count("a: b") == 1, mine


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("d: x/config.json: cannot load it", "cannot load it"),
        ("d: x/config.json [model.w]: shape (2,)", "[model.w]: shape (2,)"),
        ("d: x/other.json: cannot open (denied)", "x/other.json: cannot open (denied)"),
        ("d: x/config.json.bak: gone", "x/config.json.bak: gone"),
    ],
    ids=["prefix", "prefix_and_key", "another_file", "a_longer_name"],
)
def test_only_the_exact_location_is_dropped(message, said):
    assert without_location(ValueError(message), Path("d: x/config.json")) == said
    report = ValidationReport(path="d: x")
    report.add_error("d: x/config.json", ValueError(message))
    assert [f.message for f in report.findings] == [said]
