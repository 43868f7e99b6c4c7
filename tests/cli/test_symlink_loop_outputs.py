"""An output path through a symlink loop (`l1 -> l2 -> l1`) is refused in one line naming
the loop (exit 2), by every command that writes one; it was a RuntimeError traceback,
`[Errno 17] File exists` or "is a file, not a directory"."""

import json
import sys
from pathlib import Path

import pytest

from cli.main import main
from trainer.config import ConfigError
from trainer.local_paths import check_writable_dir


@pytest.fixture
def looped(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "l1").symlink_to("l2")
    (tmp_path / "l2").symlink_to("l1")
    (tmp_path / "model").mkdir()
    return tmp_path / "l1"


@pytest.mark.parametrize(
    "args",
    [
        ["ckpt", "import-hf", "model", "--out", "l1", "--json"],
        ["ckpt", "import-hf", "model", "--out", "l1/x", "--json"],
        ["data", "synthetic", "--out", "l1", "--json"],
        ["demo", "--out", "l1"],
    ],
)
def test_an_out_in_a_symlink_loop_is_one_line(looped, monkeypatch, capsys, args):
    monkeypatch.setattr(sys, "argv", ["mfsdp", *args])
    with pytest.raises(SystemExit) as done:
        main()
    out, err = capsys.readouterr()
    assert done.value.code == 2
    assert err.count("\n") == 1 and f"{looped} is a symlink loop" in err
    if "--json" in args:
        assert "symlink loop" in json.loads(out)["error"]


def test_a_run_dir_in_a_symlink_loop_is_refused(looped):
    with pytest.raises(ConfigError, match=f"trainer.run_dir: l1/x: {looped} is a symlink loop"):
        check_writable_dir("trainer.run_dir", "l1/x")
