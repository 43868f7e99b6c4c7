"""Every `--json` object is strict JSON in valid UTF-8: a non-finite float (a checkpoint's
`best=inf`, a loss gone NaN) was printed as `NaN`/`Infinity`, which strict parsers refuse, and a
path's byte that is not UTF-8 as the surrogate `\\udcff`, in text lines and JSON alike. Now
null, and `\\xff` in both outputs."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from cli.json_text import json_text, shown_bytes
from cli.main import main
from cli.run_report import report
from tests.support.paths import REPO


def _strict_load(text: str) -> object:
    """`text` parsed as a strict parser does: `NaN`, `Infinity` and lone surrogates refused."""

    def refuse(constant: str) -> object:
        raise ValueError(f"not JSON: {constant}")

    parsed = json.loads(text, parse_constant=refuse)
    # a lone surrogate, raw or as a `\\udcff` escape, cannot be encoded: not valid UTF-8
    json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    return parsed


def _run_main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """`mfsdp ARGS` through the real entry point, in this process: exit code, stdout, stderr."""
    monkeypatch.setattr("sys.argv", ["mfsdp", *args])
    try:
        main()
        code = 0
    except SystemExit as stopped:
        code = int(stopped.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_json_text_writes_non_finite_floats_as_null_and_bytes_as_escapes():
    undecodable = os.fsdecode(b"run\xff")
    value = {"a": float("nan"), undecodable: [float("inf"), -float("inf"), 1.5], "s": "\ud800"}
    assert _strict_load(json_text(value)) == {
        "a": None,
        "run\\xff": [None, None, 1.5],
        "s": "\\ud800",
    }
    assert shown_bytes(undecodable) == "run\\xff" and shown_bytes("plain é") == "plain é"


def test_inspect_deep_json_of_non_finite_saved_objects_is_strict(monkeypatch, capsys, tmp_path):
    checkpoint = tmp_path / "ck"
    state = {
        "model": {"w": torch.ones(2, 2)},
        "sched": {"best": float("inf"), "last": float("nan")},
    }
    dcp.save(state, checkpoint_id=str(checkpoint), no_dist=True)
    code, out, _err = _run_main(
        monkeypatch, capsys, "ckpt", "inspect", str(checkpoint), "--deep", "--json"
    )
    assert code == 0
    values = {item["name"]: item["value"] for item in _strict_load(out)["objects"]}
    assert values == {"sched.best": None, "sched.last": None}


def test_a_runs_non_finite_loss_is_null_in_its_json_result(monkeypatch, capsys):
    monkeypatch.delenv("RANK", raising=False)
    report({"final_loss": float("nan"), "val_loss": float("inf"), "final_step": 3}, True, "")
    assert _strict_load(capsys.readouterr().out) == {
        "final_loss": None,
        "val_loss": None,
        "final_step": 3,
    }


@pytest.mark.parametrize("as_json", [False, True])
def test_a_non_utf8_path_is_shown_with_its_byte_in_text_and_json(
    monkeypatch, capsys, tmp_path, as_json
):
    missing = os.fsdecode(bytes(tmp_path) + b"/run\xff")
    code, out, err = _run_main(
        monkeypatch, capsys, "ckpt", "validate", missing, *(["--json"] * as_json)
    )
    shown = f"{tmp_path}/run\\xff: no such file or directory"
    assert code == 2 and err.startswith(f"error: {shown}"), err
    if as_json:
        assert _strict_load(out)["error"].startswith(shown)


def test_a_valid_checkpoint_under_a_non_utf8_dir_is_named_alike_in_text_and_json(
    monkeypatch, capsys, tmp_path
):
    parent = Path(os.fsdecode(bytes(tmp_path) + b"/d\xff"))
    dcp.save({"model": {"w": torch.ones(2, 2)}}, checkpoint_id=str(parent / "ck"), no_dist=True)
    code, out, _err = _run_main(
        monkeypatch, capsys, "ckpt", "validate", str(parent / "ck"), "--json"
    )
    assert code == 0 and _strict_load(out)["path"] == f"{tmp_path}/d\\xff/ck"
    code, out, _err = _run_main(monkeypatch, capsys, "ckpt", "validate", str(parent / "ck"))
    assert code == 0 and f"valid: {tmp_path}/d\\xff/ck " in out, out


# The commands' JSON goes through `cli.json_text` alone; these write JSON that is no command's
# output: the demo's own marker and data files, and the error file torchrun reads back.
_NOT_OUTPUT = {"demo.py", "demo_record.py", "errors.py:json.dump("}


def test_no_command_prints_json_but_through_json_text():
    found = []
    for path in sorted((REPO / "cli").glob("*.py")):
        if path.name == "json_text.py":
            continue
        for call in re.findall(r"json\.dumps?\(", path.read_text()):
            if path.name not in _NOT_OUTPUT and f"{path.name}:{call}" not in _NOT_OUTPUT:
                found.append(f"{path.name}: {call}")
    assert found == []
