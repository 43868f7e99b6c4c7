"""verl v2 with Megatron-FSDP leaves optimizer/dist_ckpt and extra/dist_ckpt empty by
design (model/dist_ckpt holds every state; ckpt_contents.json, written last, lists them):
given, they are named so, with the role dir to give (exit 2). They were "this save did not
finish or wrote nothing" (exit 1): a good save called broken. A save that did not finish
(no ckpt_contents.json, or no `.metadata` in model/dist_ckpt) keeps that line.
"""

from __future__ import annotations

import pytest

from mfsdp_ckpt.format import layout
from tests.support.interop_layouts import one_error_line, run_cli, verl_rl_v2


@pytest.mark.parametrize("role", layout.ROLES)
@pytest.mark.parametrize("part", ["optimizer", "extra"])
def test_an_empty_part_names_the_model_dcp_and_the_role(role, part, made_optim, tmp_path):
    step = verl_rl_v2(made_optim, tmp_path, critic=True).levels["step"]
    holder = step / role
    for given in (holder / part, holder / part / "dist_ckpt"):
        for command in (("validate",), ("export-hf", "--out", tmp_path / "out")):
            code, out, err = run_cli("ckpt", command[0], given, *command[1:])
            line = one_error_line(out + err)
            assert code == 2, out + err
            assert f"keeps its {part} state in {holder / 'model' / 'dist_ckpt'}" in line, line
            assert line.endswith(f"give {holder}"), line
    code, out, err = run_cli("ckpt", "validate", holder)
    assert code == 0, out + err


@pytest.mark.parametrize("unfinished", ["ckpt_contents.json", "model/dist_ckpt/.metadata"])
def test_a_save_that_did_not_finish_keeps_its_line(unfinished, made_optim, tmp_path):
    actor = verl_rl_v2(made_optim, tmp_path).levels["actor"]
    (actor / unfinished).unlink()
    code, out, err = run_cli("ckpt", "validate", actor / "optimizer" / "dist_ckpt")
    assert code == 1, out + err
    assert "this save did not finish" in one_error_line(out + err), out + err
