"""verl's dataloader state is named by a pattern that ended in `$`, which also matches
before a trailing newline: a file `data.pt\n` beside a verl step was listed as its
dataloader state. Names end at the name, as the step-dir patterns do."""

from __future__ import annotations

import json

from tests.ckpt.test_inspect_contents_counts_non_tensor_groups import _verl_rl
from tests.support.interop_layouts import run_cli


def test_a_name_with_a_trailing_newline_is_no_dataloader_state(tmp_path):
    run, loader = _verl_rl(tmp_path)
    step = run / "global_step_4"
    (step / "data_1.pt\n").write_bytes(b"")
    code, out, err = run_cli("ckpt", "inspect", run, "--json")
    assert code == 0, out + err
    assert json.loads(out)["dataloader_state"] == [str(step / name) for name in loader]
