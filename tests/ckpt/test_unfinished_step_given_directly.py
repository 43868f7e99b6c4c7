"""A step dir given directly whose save did not finish (verl's empty `global_step_N/`, one
holding an empty `actor/`, Megatron-LM's empty `iter_NNNNNNN/` or one holding a shard and
no `.metadata`), beside a complete step: exit 1 from `validate`, `inspect` and
`export-hf`, one line naming the dir and what it lacks in the words a tracker naming it
gets ("RUN/global_step_42: empty, no .metadata: this save did not finish or wrote
nothing (other step dirs here: global_step_40)"), so the complete step is named.

Was: verl's empty step was "not a checkpoint (looked for ...)", exit 2, and Megatron's
was exit 1 naming no other step.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mfsdp_ckpt.format import layout
from tests.support.interop_layouts import BUILDERS, one_error_line, run_cli

UNFINISHED = "this save did not finish"
EMPTY = f"empty, no {layout.DCP_METADATA_FILE}: {UNFINISHED} or wrote nothing"


def _unfinished_beside(kind: str, shape: str, made_optim: Path, tmp_path: Path):
    """A run of layout `kind` with a newer step dir beside its complete one, as a save that
    stopped left it (`shape`); returns (that dir, its complete sibling, what it lacks)."""
    step = BUILDERS[kind](made_optim, tmp_path).levels["step"]
    number = layout.iter_step(step.name) or layout.parse_step_dir_name(step.name)
    assert number is not None
    megatron = layout.iter_step(step.name) is not None
    newer = step.parent / (f"iter_{number + 2:07d}" if megatron else f"global_step_{number + 2}")
    newer.mkdir()
    if shape == "empty":
        return newer, step, EMPTY
    if shape == "role-empty":
        (newer / "actor").mkdir()
        return (
            newer,
            step,
            f"holds no {layout.DCP_METADATA_FILE}, which a save writes last: {UNFINISHED}",
        )
    (newer / "__0_0.distcp").write_bytes(b"x" * 64)  # a shard, no .metadata
    return newer, step, f"1 file(s), no {layout.DCP_METADATA_FILE}: {UNFINISHED} or wrote nothing"


CASES = [
    ("verl-rl-v1", "empty"),
    ("verl-rl-v1", "role-empty"),
    ("verl-rl-v2", "empty"),
    ("verl-sft", "empty"),
    ("megatron-lm", "empty"),
    ("megatron-lm", "shard"),
]


@pytest.mark.parametrize(("kind", "shape"), CASES, ids=[f"{k}-{s}" for k, s in CASES])
def test_each_command_names_the_unfinished_step_and_its_complete_sibling(
    kind, shape, made_optim, tmp_path
):
    newer, step, lacks = _unfinished_beside(kind, shape, made_optim, tmp_path)
    line = f"error: {newer}: {lacks} (other step dirs here: {step.name})"
    code, out, err = run_cli("ckpt", "validate", newer)
    assert code == 1 and out.splitlines() == [
        line,
        f"INVALID: {newer} (not read as a checkpoint: see the error above)",
    ], out + err
    for command in (["inspect"], ["export-hf", "--out", tmp_path / "hf"]):
        code, out, err = run_cli("ckpt", *command, newer)
        assert code == 1 and one_error_line(err) == line, out + err


def test_a_step_alone_names_no_other(tmp_path):
    for name in ("global_step_7", "iter_0000007"):
        step = tmp_path / name
        step.mkdir()
        code, out, err = run_cli("ckpt", "inspect", step)
        assert code == 1 and one_error_line(err) == f"error: {step}: {EMPTY}", out + err
        step.rmdir()
