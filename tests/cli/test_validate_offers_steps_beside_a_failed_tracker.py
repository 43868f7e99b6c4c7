"""`mfsdp ckpt validate RUN` of another trainer's run whose tracker failed, beside a
complete step: the error names the tracker and what is wrong with it, the verdict names the
run dir, the tracker and the complete step dir to give instead (--json: the same finding,
and the step in `note`), exit 1. Every tracker discovery reads: Megatron-Bridge's
latest_train_state.pt (alone, or with the .txt damaged too), Megatron-LM's and verl's
latest_checkpointed_iteration.txt (unreadable, or naming a step that is not here), and the
Hugging Face Trainer's trainer_state.json in its newest checkpoint-N.

Was: "INVALID: RUN (not read as a checkpoint: see the error above)", no word of the sound
step beside the tracker; the Trainer's damaged trainer_state.json escaped validate as the
failure object (`{error, exit_code}`), where a script reads `valid`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.format import hf_trainer, layout
from tests.ckpt.test_interop_hf_trainer import save_trainer_checkpoint
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import bridge_run, train_state
from tests.support.paths import FIXTURES

TXT, PT = layout.TRACKER_FILE, layout.BRIDGE_TRACKER_FILE


@pytest.fixture(scope="module")
def bridge(tmp_path_factory) -> Path:
    """A Megatron-Bridge run with iter_0000010/ alone, both trackers at 10."""
    model = tiny_causal_lm("qwen2", vocab=500)
    return bridge_run(tmp_path_factory.mktemp("bridge"), model, steps=(10,), rows=512)


@pytest.fixture(scope="module")
def trainer_out(tmp_path_factory) -> Path:
    """The Hugging Face Trainer's output dir with checkpoint-2 and checkpoint-4."""
    model = tiny_causal_lm("qwen2", vocab=64)
    optimizer = torch.optim.AdamW(model.parameters())
    run = tmp_path_factory.mktemp("trainer") / "out"
    for step in (2, 4):
        save_trainer_checkpoint(run, step, model, optimizer)
    return run


KEEP = "keep"  # a tracker left as the run wrote it


def _bridge(bridge: Path, tmp_path: Path, pt: bytes | str | None, txt: str | None):
    """The Bridge run with each tracker removed (None), kept (KEEP) or replaced."""
    run = shutil.copytree(bridge, tmp_path / "run")
    for name, content in ((PT, pt), (TXT, txt)):
        if content is None:
            (run / name).unlink()
        elif content != KEEP:
            (run / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return run, run / "iter_0000010"


def _verl(tmp_path: Path, txt: str):
    """verl's run (no manifest: another trainer's) with global_step_2 complete."""
    run = shutil.copytree(FIXTURES / "megatron_fsdp_qwen2" / "run", tmp_path / "run")
    (run / "global_step_2" / layout.MANIFEST_FILE).unlink()
    (run / TXT).write_text(txt)
    return run, run / "global_step_2"


# each: (the run dir, its complete step) from (bridge, trainer_out, tmp_path), and the
# tracker (a name in the run dir) whose finding the error is
CASES = {
    "bridge .pt unreadable": (lambda b, t, p: _bridge(b, p, b"garbage", KEEP), PT),
    "bridge .pt and .txt damaged": (lambda b, t, p: _bridge(b, p, b"", "abc"), PT),
    "bridge .pt names a missing step": (
        lambda b, t, p: _bridge(b, p, _train_state_bytes(20, p), KEEP),
        PT,
    ),
    "megatron-lm .txt unreadable": (lambda b, t, p: _bridge(b, p, None, "abc"), TXT),
    "megatron-lm .txt names a missing step": (lambda b, t, p: _bridge(b, p, None, "30"), TXT),
    "verl .txt unreadable": (lambda b, t, p: _verl(p, "\x00"), TXT),
    "verl .txt names a missing step": (lambda b, t, p: _verl(p, "7"), TXT),
    "hf trainer_state.json not JSON": (
        lambda b, t, p: _trainer(t, p, "{garbage"),
        f"checkpoint-4/{hf_trainer.TRAINER_STATE_FILE}",
    ),
}


def _train_state_bytes(step: int, tmp_path: Path) -> bytes:
    torch.save(train_state(step), tmp_path / "state.pt")
    return (tmp_path / "state.pt").read_bytes()


def _trainer(trainer_out: Path, tmp_path: Path, text: str):
    run = shutil.copytree(trainer_out, tmp_path / "out")
    (run / "checkpoint-4" / hf_trainer.TRAINER_STATE_FILE).write_text(text)
    return run, run / "checkpoint-2"


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_validate_names_the_tracker_and_offers_the_complete_step(
    case, bridge, trainer_out, tmp_path
):
    build, tracker_name = case
    run, step = build(bridge, trainer_out, tmp_path)
    tracker = run / tracker_name
    offered = f"complete step dir here: {step}: give it to validate that step"
    code, out, err = run_cli("ckpt", "validate", run)
    lines = out.splitlines()
    assert code == 1 and len(lines) == 2, (out, err)
    assert lines[0].startswith(f"error: {tracker}: "), out
    assert lines[1] == f"INVALID: {run} ({tracker.name} failed, see above; {offered})", out
    code, out, err = run_cli("ckpt", "validate", run, "--json")
    found = json.loads(out)
    assert code == 1 and found["valid"] is False and found["checkpoint"] == str(run), found
    assert [(f["severity"], f["where"]) for f in found["findings"]] == [("error", str(tracker))]
    assert found["note"] == f"{tracker} failed; {offered}", found
    code, out, err = run_cli("ckpt", "validate", step)  # the step offered reads alone
    assert code == 0 and out.splitlines()[-1].startswith("valid: "), (out, err)


def test_a_trainer_checkpoint_whose_model_save_did_not_finish_is_not_offered(trainer_out, tmp_path):
    run, step = _trainer(trainer_out, tmp_path, "{garbage")
    (step / f"{hf_trainer.MODEL_DCP_PREFIX}0" / layout.DCP_METADATA_FILE).unlink()
    code, out, _err = run_cli("ckpt", "validate", run)
    assert code == 1 and "no complete step dir here" in out.splitlines()[-1], out
    assert str(step) not in out.splitlines()[-1], out


def test_with_no_complete_step_it_says_so(bridge, tmp_path):
    run, step = _bridge(bridge, tmp_path, b"garbage", KEEP)
    (step / layout.DCP_METADATA_FILE).unlink()  # a save that did not finish
    code, out, _err = run_cli("ckpt", "validate", run)
    assert code == 1 and out.splitlines()[-1] == (
        f"INVALID: {run} ({PT} failed, see above; no complete step dir here)"
    ), out


def test_several_complete_steps_are_each_offered(tmp_path):
    run, step = _verl(tmp_path, "abc")
    newer = shutil.copytree(step, run / "global_step_3")
    code, out, _err = run_cli("ckpt", "validate", run)
    assert code == 1 and out.splitlines()[-1] == (
        f"INVALID: {run} ({TXT} failed, see above; complete step dirs here: {step}, {newer}:"
        " give one to validate that step)"
    ), out
