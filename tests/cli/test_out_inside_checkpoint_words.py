"""Every command that writes an --out refuses a checkpoint or a run dir there in the same
words (`format.output_inside`): export-hf said a run dir given as --out "lies inside the
checkpoint" that run dir, its own path."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    from tests.support.export import save_single_process_checkpoint
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("source")
    save_single_process_checkpoint(root / "run", build_tiny_model_dir(root / "assets"))
    return root / "run"


def _other_run(tmp_path: Path) -> Path:
    run = tmp_path / "other"
    (run / "global_step_2").mkdir(parents=True)
    (run / "latest_checkpointed_iteration.txt").write_text("2\n")
    return run


@pytest.mark.parametrize("command", ["export-hf", "data"])
@pytest.mark.parametrize(
    "where, words",
    [("", "is a checkpoint or a training run's dir"), ("global_step_2/hf", "lies inside")],
)
def test_a_run_dir_or_a_step_as_out_is_named_alike(ckpt, tmp_path, command, where, words):
    run = _other_run(tmp_path)
    out = run / where if where else run
    if command == "data":
        args: list[object] = ["data", "synthetic", "--out", out]
    else:
        args = ["ckpt", "export-hf", ckpt, "--out", out, "--overwrite"]
    code, _stdout, stderr = run_cli(*args)
    assert code == 2
    line = one_error(stderr, str(out), words)
    if where:
        assert f"lies inside the checkpoint {run / 'global_step_2'};" in line
    assert sorted(p.name for p in run.rglob("*")) == [
        "global_step_2",
        "latest_checkpointed_iteration.txt",
    ]
