"""Another trainer's tracker naming a step dir whose save did not finish, in every layout
(verl RL v1 and v2, SFT, Megatron-LM, Megatron-Bridge), beside a complete step: exit 1
from `validate`, `inspect` and `export-hf`, one line naming the tracker, the step and what
it lacks ("names '42', but RUN/global_step_42: empty, no .metadata: this save did not
finish or wrote nothing (other step dirs here: ...)"), and validate's verdict (--json:
`note`) offering the complete step, as for any tracker that failed.

Was: verl's empty `global_step_N/` (or one holding an empty `actor/`) was "not a
checkpoint (looked for ...)", exit 2, with --json the failure object and no step offered;
Megatron's unfinished `iter_N/` was exit 1, but its verdict said "not read as a
checkpoint" and `note` was null.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.format import checkpoint_resolution, layout
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import BUILDERS, one_error_line, run_cli
from tests.support.megatron_checkpoints import bridge_run, train_state

UNFINISHED = "this save did not finish"


def _laid(kind: str, made_optim: Path, tmp_path: Path) -> tuple[Path, Path, int]:
    """A run of layout `kind`: its dir, its one complete step dir, that step's number."""
    if kind == "megatron-bridge":
        run = bridge_run(tmp_path, tiny_causal_lm("qwen2", vocab=500), steps=(10,), rows=512)
        return run, run / "iter_0000010", 10
    laid = BUILDERS[kind](made_optim, tmp_path)
    step = laid.levels["step"]
    number = layout.iter_step(step.name) or layout.parse_step_dir_name(step.name)
    assert number is not None
    return laid.run, step, number


def _track_unfinished(run: Path, step: Path, number: int, shape: str) -> tuple[Path, str]:
    """A newer step dir beside `step` as a save that stopped left it (`shape`: nothing in
    it, an empty `actor/`, or the layout's DCP dir holding a shard and no `.metadata`),
    with the run's tracker naming it; returns it and what the line says of it."""
    megatron = layout.iter_step(step.name) is not None
    newer = run / (f"iter_{number + 2:07d}" if megatron else f"global_step_{number + 2}")
    newer.mkdir()
    said = f"{newer}: empty, no {layout.DCP_METADATA_FILE}: {UNFINISHED} or wrote nothing"
    if shape == "role-empty":
        (newer / "actor").mkdir()
        said = (
            f"{newer}: holds no {layout.DCP_METADATA_FILE}, which a save writes last: {UNFINISHED}"
        )
    elif shape == "shard":
        dcp = newer / next(step.rglob(layout.DCP_METADATA_FILE)).parent.relative_to(step)
        dcp.mkdir(parents=True, exist_ok=True)
        (dcp / "__0_0.distcp").write_bytes(b"x" * 64)
        said = f"{dcp}: 1 file(s), no {layout.DCP_METADATA_FILE}: {UNFINISHED} or wrote nothing"
    (run / layout.TRACKER_FILE).write_text(str(number + 2))
    if (run / layout.BRIDGE_TRACKER_FILE).exists():
        torch.save(train_state(number + 2), run / layout.BRIDGE_TRACKER_FILE)
    return newer, said


CASES = [
    ("verl-rl-v1", "empty"),
    ("verl-rl-v1", "role-empty"),
    ("verl-rl-v1", "shard"),
    ("verl-rl-v2", "empty"),
    ("verl-sft", "empty"),
    ("megatron-lm", "empty"),
    ("megatron-lm", "shard"),
    ("megatron-bridge", "empty"),
]


@pytest.mark.parametrize(("kind", "shape"), CASES, ids=[f"{k}-{s}" for k, s in CASES])
def test_the_tracker_failed_and_the_complete_step_is_offered(kind, shape, made_optim, tmp_path):
    run, step, number = _laid(kind, made_optim, tmp_path)
    _newer, said = _track_unfinished(run, step, number, shape)
    name = layout.BRIDGE_TRACKER_FILE if kind == "megatron-bridge" else layout.TRACKER_FILE
    tracker = run / name
    line = f"names '{number + 2}', but {said} (other step dirs here: {step.name})"
    with pytest.raises(layout.DamagedTrackerError) as caught:
        checkpoint_resolution.resolve_checkpoint(run)
    assert isinstance(caught.value, layout.IncompleteCheckpointError), caught.value
    assert caught.value.tracker == tracker, caught.value

    offered = f"complete step dir here: {step}: give it to validate that step"
    code, out, err = run_cli("ckpt", "validate", run)
    assert code == 1 and out.splitlines() == [
        f"error: {tracker}: {line}",
        f"INVALID: {run} ({name} failed, see above; {offered})",
    ], out + err
    code, out, err = run_cli("ckpt", "validate", run, "--json")
    found = json.loads(out)
    assert code == 1 and found["valid"] is False, out + err
    assert [(f["where"], f["message"]) for f in found["findings"]] == [(str(tracker), line)]
    assert found["note"] == f"{tracker} failed; {offered}", found
    for command in (["inspect"], ["export-hf", "--out", tmp_path / "hf"]):
        code, out, err = run_cli("ckpt", *command, run)
        assert code == 1 and one_error_line(err) == f"error: {tracker} {line}", out + err
