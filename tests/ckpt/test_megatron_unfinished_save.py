"""A Megatron-LM iteration dir without `.metadata` (a save that did not finish, or an empty
dir) is a damaged checkpoint, told as verl's layouts tell one: exit 1, naming what the dir
holds and the other step dirs there.

Was: tracker 100 with `iter_0000200/` holding a .distcp and no `.metadata`, validate noted
"iter_0000200/ (step 200) is newer ...: give RUN/iter_0000200 to read the newer one",
advising a save that never finished; with the tracker at 200, or given that dir, validate
and export-hf said "not a checkpoint (looked for .metadata, ...)", exit 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mfsdp_ckpt.format import checkpoint_resolution, layout
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import mcore_weights, megatron_args, save_dcp

UNFINISHED = "no .metadata: this save did not finish or wrote nothing"


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A Megatron-LM run holding a complete iter_0000100/."""
    model = tiny_causal_lm("llama", vocab=64)
    run = tmp_path_factory.mktemp("megatron") / "run"
    state = {"args": megatron_args(model), "iteration": 100, "model": mcore_weights(model)}
    save_dcp(state, run / "iter_0000100")
    return run


def _run(saved: Path, tmp_path: Path, tracked: int, shard: bool) -> Path:
    """`saved` with the tracker at `tracked` and an unfinished iter_0000200/ (one .distcp,
    or nothing when not `shard`)."""
    import shutil

    run = shutil.copytree(saved, tmp_path / "run")
    (run / "iter_0000200").mkdir()
    if shard:
        (run / "iter_0000200" / "__0_0.distcp").write_bytes(b"x" * 100)
    (run / layout.TRACKER_FILE).write_text(str(tracked))
    return run


def test_a_newer_unfinished_save_is_not_advised(saved, tmp_path):
    run = _run(saved, tmp_path, 100, shard=True)
    note = checkpoint_resolution.resolve_checkpoint(run).note or ""
    assert note == (
        f"{run / layout.TRACKER_FILE} names step 100, but iter_0000200/ (step 200) is newer"
        " and holds no .metadata, which a save writes last: a save that did not finish;"
        " reading step 100"
    )
    (run / "iter_0000200" / ".metadata").write_bytes(b"saved")  # finished: it is advised
    note = checkpoint_resolution.resolve_checkpoint(run).note or ""
    assert note.endswith(f"give {run / 'iter_0000200'} to read the newer one"), note


@pytest.mark.parametrize("shard", [True, False], ids=["a-shard", "empty"])
@pytest.mark.parametrize("command", ["validate", "export-hf"])
def test_an_unfinished_save_read_is_a_damaged_checkpoint(saved, tmp_path, shard, command):
    run = _run(saved, tmp_path, 200, shard=shard)
    step = run / "iter_0000200"
    held = "1 file(s)" if shard else "empty"
    out = ["--out", str(tmp_path / "hf")] if command == "export-hf" else []
    validate = command == "validate"  # validate says it as its finding: "where: message"
    code, stdout, err = run_cli("ckpt", command, run, *out)
    assert code == 1, stdout + err
    assert one_error_line(stdout if validate else err) == (
        f"error: {run / layout.TRACKER_FILE}{':' if validate else ''} names '200', but {step}:"
        f" {held}, {UNFINISHED} (other step dirs here: iter_0000100)"
    )
    code, stdout, err = run_cli("ckpt", command, step, *out)
    assert code == 1, stdout + err
    assert one_error_line(stdout if validate else err) == (
        f"error: {step}: {held}, {UNFINISHED} (other step dirs here: iter_0000100)"
    )
