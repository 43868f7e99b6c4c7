"""A verl file given where a directory is read (a step's data.pt or data_<rank>.pt, a role
dir's transformer_config.json) names the checkpoint dir holding it, as Bridge's
run_config.yaml and a `.distcp` do: "not a directory" alone left the level to guess."""

from __future__ import annotations

import pytest

from tests.support.interop_layouts import one_error_line, run_cli, verl_rl_v1, verl_sft


@pytest.mark.parametrize(
    "build,file,holder",
    [
        (verl_rl_v1, "data.pt", "step"),
        (verl_rl_v1, "actor/transformer_config.json", "actor"),
        (verl_sft, "data_0.pt", "step"),
    ],
)
def test_a_verl_file_names_the_dir_to_give(build, file, holder, made_optim, tmp_path):
    laid = build(made_optim, tmp_path)
    given = laid.levels["step"] / file
    code, out, err = run_cli("ckpt", "validate", given)
    assert code == 2, out + err
    assert one_error_line(err).endswith(f"dist_ckpt dir: {laid.levels[holder]} holds it)"), err
    code, out, err = run_cli("ckpt", "validate", laid.levels[holder])
    assert code == 0, out + err


def test_a_data_pt_outside_a_step_dir_names_no_holder(tmp_path):
    (tmp_path / "data.pt").write_bytes(b"rows")
    code, _out, err = run_cli("ckpt", "validate", tmp_path / "data.pt")
    assert code == 2 and "holds it" not in one_error_line(err), err
