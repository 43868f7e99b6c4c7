"""A verl v2 step whose ckpt_contents.json is damaged (empty, not an object, cut short) is
a checkpoint whose content is broken: exit 1 from inspect, validate and export-hf, one line
naming the file, as a damaged tracker is (docs/interop.md: 1 when it is recognisably a
checkpoint whose content is broken).

Was: exit 2, bad usage, as if the path named no checkpoint; verl writes the file through a
temporary file, fsync and rename, so a broken one is damage on disk.
"""

from __future__ import annotations

import json

import pytest

from mfsdp_ckpt.format import layout
from tests.support.interop_layouts import BUILDERS, one_error_line, run_cli


@pytest.mark.parametrize("text", ["", "[]", "null", '{"schema_version": 2, "cont'])
@pytest.mark.parametrize("command", ["inspect", "validate", "export-hf"])
def test_a_damaged_contents_file_is_exit_1(made_optim, tmp_path, text, command):
    laid = BUILDERS["verl-rl-v2"](made_optim, tmp_path)
    contents = laid.levels["actor"] / layout.VERL_CONTENTS_FILE
    contents.write_text(text)
    extra = ["--out", tmp_path / "hf"] if command == "export-hf" else []
    code, out, err = run_cli("ckpt", command, laid.run, *extra)
    said = out if command == "validate" else err  # validate's findings are its report
    assert code == 1 and str(contents) in one_error_line(said), out + err
    assert not (tmp_path / "hf").exists()


def test_json_says_exit_1(made_optim, tmp_path):
    laid = BUILDERS["verl-rl-v2"](made_optim, tmp_path)
    (laid.levels["actor"] / layout.VERL_CONTENTS_FILE).write_text("[]")
    code, out, _err = run_cli("ckpt", "inspect", laid.run, "--json")
    assert code == 1 and json.loads(out)["exit_code"] == 1, out


def test_validate_json_says_invalid(made_optim, tmp_path):
    """validate's own object, `valid: false` with the file as the finding's place, as for
    any other broken checkpoint (docs/json.md), not the bare {error, exit_code}."""
    laid = BUILDERS["verl-rl-v2"](made_optim, tmp_path)
    contents = laid.levels["actor"] / layout.VERL_CONTENTS_FILE
    contents.write_text("null")
    code, out, _err = run_cli("ckpt", "validate", laid.run, "--json")
    report = json.loads(out)
    assert code == 1 and report["valid"] is False, out
    assert [f["where"] for f in report["findings"]] == [str(contents)], out
