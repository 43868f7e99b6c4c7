"""import-hf (always) and export-hf --verify build config.json with transformers, whose
import takes seconds (8-15 on 2 cores) in which nothing was printed: one line on stderr
says so as it begins (cli/config_check_lines.py), never on stdout, and none under --json."""

from __future__ import annotations

import json

from click.testing import CliRunner

from cli.config_check_lines import checking_line
from cli.main import app
from tests.support.hf_model_files import saved_hf_model


def test_import_hf_says_the_config_check_on_stderr_first(tmp_path):
    source = saved_hf_model(tmp_path, "qwen2", tied=True)
    result = CliRunner().invoke(
        app, ["ckpt", "import-hf", str(source), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines[0] == checking_line(str(source / "config.json")), result.stderr
    assert lines.count(lines[0]) == 1, result.stderr
    assert "checking config" not in result.stdout


def test_export_hf_verify_says_it_and_neither_says_it_under_json(tmp_path):
    source = saved_hf_model(tmp_path, "qwen2", tied=True)
    out = tmp_path / "o"
    done = CliRunner().invoke(app, ["ckpt", "import-hf", str(source), "--out", str(out), "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["model_type"] == "qwen2"
    assert "checking config" not in done.stderr, done.stderr
    export = [
        "ckpt",
        "export-hf",
        str(out),
        "--hf-config",
        str(source),
        "--out",
        str(tmp_path / "e"),
    ]
    shown = CliRunner().invoke(app, [*export, "--verify"])
    assert shown.exit_code == 0, shown.output
    assert shown.stderr.splitlines()[0] == checking_line(str(source / "config.json"))
    quiet = CliRunner().invoke(app, [*export[:-1], str(tmp_path / "j"), "--verify", "--json"])
    assert quiet.exit_code == 0, quiet.output
    assert "checking config" not in quiet.stderr, quiet.stderr
