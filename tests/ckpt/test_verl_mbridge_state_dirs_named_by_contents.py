"""verl's mbridge save keeps the optimizer state in (v2) optimizer/dist_ckpt and the RNG
state, verl's extra state, in extra/dist_ckpt: both torch_dist saves holding no model. The
line naming extra/dist_ckpt (given itself, or the role dir of a save without optimizer)
ended "mfsdp does not read the optimizer state", sending users to look for an optimizer
state never saved there. Now each dir is named by what it holds, by every command."""

from __future__ import annotations

import pytest

from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.verl_mbridge_saves import torch_dist, verl_v2_mbridge_step

COMMANDS = ["validate", "inspect", "export-hf"]


def _line(command: str, given, tmp_path) -> str:
    extra = ["--out", tmp_path / "out"] if command == "export-hf" else []
    code, stdout, err = run_cli("ckpt", command, given, *extra)
    assert code == 2, stdout + err
    return one_error_line(err)


@pytest.mark.parametrize("optimizer", [True, False], ids=["with-optimizer", "without"])
def test_extra_dist_ckpt_is_named_as_rng_state(tmp_path, optimizer):
    actor = verl_v2_mbridge_step(tmp_path, optimizer=optimizer)
    extra = actor / "extra" / "dist_ckpt"
    given = [extra, actor / "extra", *([] if optimizer else [actor])]
    for command in COMMANDS:
        for level in given:
            line = _line(command, level, tmp_path)
            assert line.startswith(f"error: {extra}: "), line
            assert "only RNG state (verl's extra state)" in line, line
            assert line.endswith("mfsdp does not read the RNG state"), line
            assert "optimizer state" not in line, line


def test_optimizer_dist_ckpt_is_named_as_optimizer_state(tmp_path):
    actor = verl_v2_mbridge_step(tmp_path)
    for command in COMMANDS:
        for level in (actor, actor / "optimizer" / "dist_ckpt"):
            line = _line(command, level, tmp_path)
            assert line.startswith(f"error: {actor / 'optimizer' / 'dist_ckpt'}: "), line
            assert "holding optimizer state only" in line, line
            assert line.endswith("mfsdp does not read the optimizer state"), line
            assert "RNG" not in line, line


def test_a_state_dir_holding_nothing_names_no_state(tmp_path):
    actor = verl_v2_mbridge_step(tmp_path, optimizer=False)
    extra = actor / "extra" / "dist_ckpt"
    for name in extra.iterdir():
        name.unlink()
    torch_dist({}, extra)  # save_contents [model]: verl's path helper's save of nothing
    line = _line("validate", extra, tmp_path)
    assert "holding no tensor (no model entry in its .metadata), as verl's" in line, line
    assert "does not read" not in line and "RNG" not in line, line
