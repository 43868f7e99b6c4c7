"""What `ckpt import-hf` and `ckpt export-hf` print: with --json, one object holding every field
of the result (scripts read these keys); without, notes on stderr and one summary line."""

import json

from click.testing import CliRunner

from cli.main import app
from tests.support.cli_errors import without_phase_lines
from tests.support.hf_model_files import saved_hf_model

# The leading keys both commands share; each then names its own, in its result's field order.
COMMON_KEYS = ["out_dir", "layout", "model_type", "dtype", "tensors", "bytes"]
IMPORT_KEYS = [
    *COMMON_KEYS,
    "seconds",
    "checkpoint",
    "notes",
    "convert_seconds",
    "convert_gb_per_s",
]
EXPORT_KEYS = [
    *COMMON_KEYS,
    "files",
    "seconds",
    "mismatches",
    "notes",
    "dropped_mtp",
    "convert_seconds",
    "verify_seconds",
    "checkpoint",
    "step",
    "step_from",
    "gb_per_s",
    "convert_gb_per_s",
    "verify_gb_per_s",
]


def _mfsdp(*args: str):
    result = CliRunner().invoke(app, ["ckpt", *args])
    assert result.exit_code == 0, result.output + result.stderr
    return result


def test_json_output_names_every_result_field_in_order(tmp_path):
    source = saved_hf_model(tmp_path, "qwen2", tied=True)
    run, out = str(tmp_path / "run"), str(tmp_path / "hf")
    imported = json.loads(
        _mfsdp("import-hf", str(source), "--out", run, "--layout", "hf", "--json").stdout
    )
    assert list(imported) == IMPORT_KEYS
    assert imported["out_dir"] == run and imported["layout"] == "hf"
    exported = json.loads(_mfsdp("export-hf", run, "--out", out, "--json").stdout)
    assert list(exported) == EXPORT_KEYS
    assert exported["out_dir"] == out and exported["model_type"] == imported["model_type"]
    seconds = exported["seconds"]
    assert exported["gb_per_s"] == (exported["bytes"] / 1e9 / seconds if seconds else 0.0)


def test_plain_output_is_one_summary_line(tmp_path):
    source = saved_hf_model(tmp_path, "qwen2", tied=True)
    run = str(tmp_path / "run")
    imported = _mfsdp("import-hf", str(source), "--out", run, "--layout", "hf")
    exported = _mfsdp("export-hf", run, "--out", str(tmp_path / "hf"))
    for result in (imported, exported):
        assert len(result.stdout.splitlines()) == 1 and not result.stdout.startswith("{")
        said = without_phase_lines(result.stderr)  # import-hf's config check line
        assert all(line.startswith("note: ") for line in said.splitlines() if line)
