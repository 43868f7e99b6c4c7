"""`mfsdp train sft|grpo --json`: a failure is one JSON object on stdout too, as with the ckpt
commands, whether the command's options or a check in its body (config, data files) found
it; without --json stdout stays empty."""

from __future__ import annotations

import json

import pytest

from tests.support.interop_layouts import run_cli


@pytest.mark.parametrize("command", ["sft", "grpo"])
@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["data.train_files=/nonexistent.parquet"], "/nonexistent.parquet: no such file"),
        (["trainer.no_such_key=1"], "no_such_key"),
    ],
)
def test_a_failed_train_prints_json_with_json(tmp_path, command, overrides, needle):
    args = ["train", command, f"trainer.run_dir={tmp_path}/run", *overrides]
    code, out, err = run_cli(*args[:2], "--json", *args[2:])
    assert code == 2, err
    reply = json.loads(out)
    assert reply["exit_code"] == 2 and needle in reply["error"], reply
    assert err.startswith("error: ") and needle in err
    plain_code, plain_out, _ = run_cli(*args)
    assert plain_code == 2 and plain_out == ""
