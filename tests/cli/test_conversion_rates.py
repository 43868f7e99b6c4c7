"""The rate `import-hf` and `export-hf [--verify]` report is the tensors' own: a tiny model's
import said `1.30 MiB in 6.7 s (0.2 MB/s)`, 6.3 s of it importing transformers to build
config.json (`hf_config.refuse_unloadable`). That start-up is made slow here (a second), and
the conversion's and verification's times, rates and the `in all` total are checked, in the
summary line and in --json alike."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.convert import export_hf, import_hf
from mfsdp_ckpt.convert.units import human_bytes, took
from tests.support.hf_model_files import saved_hf_model

SLOW_START = 1.0  # seconds the config check takes here, as importing transformers does


@pytest.fixture
def slow_config_check(monkeypatch):
    for module in (import_hf, export_hf):
        check = module.refuse_unloadable

        def slow(*args, _check=check, **kwargs):
            time.sleep(SLOW_START)
            return _check(*args, **kwargs)

        monkeypatch.setattr(module, "refuse_unloadable", slow)


def _json(*args: str) -> dict:
    done = CliRunner().invoke(app, ["ckpt", *args, "--json"])
    assert done.exit_code == 0, done.output + done.stderr
    return json.loads(done.stdout)


def test_import_times_the_tensors_apart_from_start_up(tmp_path, slow_config_check):
    source = saved_hf_model(tmp_path, "qwen2", tied=True)
    result = _json("import-hf", str(source), "--out", str(tmp_path / "run"), "--layout", "hf")
    assert result["seconds"] - result["convert_seconds"] >= SLOW_START, result
    assert result["convert_gb_per_s"] == result["bytes"] / 1e9 / result["convert_seconds"]


def test_export_and_verify_are_timed_apart_from_start_up(tmp_path, slow_config_check):
    source = saved_hf_model(tmp_path, "qwen2", tied=True)
    run = str(tmp_path / "run")
    import_hf.import_hf(source, run, layout_name="hf")
    result = _json("export-hf", run, "--out", str(tmp_path / "hf"), "--verify")
    spent = result["convert_seconds"] + result["verify_seconds"]
    assert result["seconds"] - spent >= SLOW_START, result
    for phase in ("convert", "verify"):
        rate = result["bytes"] / 1e9 / result[f"{phase}_seconds"]
        assert result[f"{phase}_gb_per_s"] == rate, phase
    assert result["gb_per_s"] == result["bytes"] / 1e9 / result["seconds"]  # as it was


def test_the_summary_line_gives_the_tensors_rate_and_the_total(tmp_path, slow_config_check):
    source = saved_hf_model(tmp_path, "qwen2", tied=True)
    imported = import_hf.import_hf(source, tmp_path / "run", layout_name="hf")
    exported = export_hf.export_hf(tmp_path / "run", tmp_path / "hf", verify=True)
    assert imported.convert_seconds is not None and exported.convert_seconds is not None
    assert exported.verify_seconds is not None
    assert imported.summary().startswith(
        f"imported {imported.tensors} tensors, {human_bytes(imported.bytes)}"
        f" {took(imported.bytes, imported.convert_seconds)}, {imported.seconds:.1f} s in all,"
    )
    assert (
        f" {took(exported.bytes, exported.convert_seconds)}, verified"
        f" {took(exported.bytes, exported.verify_seconds)}, {exported.seconds:.1f} s in all,"
    ) in exported.summary()
