"""`mfsdp ckpt inspect|validate|export-hf` of the huggingface/ dir (config only) of a step in
a format mfsdp does not read: verl's FSDP backend's got only "not a checkpoint (looked for
...)", where a Megatron-FSDP step's is told the checkpoint it lies in, and a torch_dist
step's was told to give that checkpoint, which is refused next. Each now ends with that
step's own refusal: what it is and the verl.model_merger command that converts it."""

from __future__ import annotations

import pytest

from tests.ckpt.test_unread_step_hf_dir_names_converter import UNREAD, _hf_dir
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli

COMMANDS = ("inspect", "validate", "export-hf")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", list(UNREAD))
def test_the_hf_dir_of_an_unread_step_names_the_step_and_its_converter(tmp_path, case, command):
    build, what, converter = UNREAD[case]
    actor = build(tmp_path)
    hf = _hf_dir(actor)
    out = ["--out", tmp_path / "out"] if command == "export-hf" else []
    code, _stdout, err = run_cli("ckpt", command, hf, *out)
    assert code == 2
    line = one_error(err, f"{hf}: not a checkpoint (looked for", what)
    assert "; it lies in " in line and converter.format(actor=actor) in line
    assert "give that" not in line
    assert not (tmp_path / "out").exists()
