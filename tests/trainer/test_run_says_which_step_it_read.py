"""A run whose model.path is a run dir says which step's weights it read and why, and the
note inspect, validate and export-hf print for that path (a newer save that did not
finish). It said only "fsdp2 on 1 x cpu, ...": the step chosen, the tracker and the
unfinished newer save went unsaid, where verl says "Load from checkpoint folder"."""

from __future__ import annotations

import shutil

import pytest

from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from tests.support.interop_layouts import run_cli
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft

SETTINGS = ("data.global_batch_size=8", "data.max_tokens_per_micro_batch=256")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """An mfsdp run with steps 1 and 2 (tracker 2), and its data."""
    root = tmp_path_factory.mktemp("made")
    data = write_chat_jsonl(root / "train.jsonl", rows=16)
    run_sft(
        tiny_config(data, root / "A", *SETTINGS, "trainer.total_steps=2", "checkpoint.save_every=1")
    )
    return root, data


def _started(tmp_path, data, capsys, *overrides: str) -> list[str]:
    capsys.readouterr()
    run_sft(tiny_config(data, tmp_path / "run", *SETTINGS, "trainer.total_steps=1", *overrides))
    return [
        line
        for line in capsys.readouterr().err.splitlines()
        if "weights from" in line or "note:" in line
    ]


def test_a_verl_run_names_the_trackers_step_and_the_unfinished_newer_save(made, tmp_path, capsys):
    root, data = made
    actor = tmp_path / "verl" / "global_step_2" / "actor"
    for piece in ("dist_ckpt", "huggingface"):
        shutil.copytree(root / "A" / "global_step_2" / piece, actor / piece)
    (tmp_path / "verl" / "global_step_3" / "actor" / "dist_ckpt").mkdir(parents=True)
    (tmp_path / "verl" / "latest_checkpointed_iteration.txt").write_text("2")
    note = resolve_checkpoint(tmp_path / "verl").note
    assert note is not None and "did not finish" in note
    lines = _started(tmp_path, data, capsys, f"model.path={tmp_path / 'verl'}")
    assert lines == [f"[sft] weights from {actor} (the tracker's step)", f"[sft] note: {note}"]


def test_an_mfsdp_run_without_tracker_names_the_newest_complete_step(made, tmp_path, capsys):
    root, data = made
    shutil.copytree(root / "A", tmp_path / "A")
    assert (tmp_path / "A" / "global_step_1").is_dir()
    (tmp_path / "A" / "latest_checkpointed_iteration.txt").unlink()
    lines = _started(tmp_path, data, capsys, f"model.path={tmp_path / 'A'}")
    assert lines == [
        f"[sft] weights from {tmp_path / 'A' / 'global_step_2'} (the newest complete step)",
        f"[sft] note: {tmp_path / 'A'} has no latest_checkpointed_iteration.txt: reading"
        " global_step_2, the newest complete step, the one checkpoint.resume=auto resumes"
        " without it; other step dirs here: global_step_1",
    ]


def test_a_step_given_is_named_without_a_reason(made, tmp_path, capsys):
    root, data = made
    step = root / "A" / "global_step_1"
    assert _started(tmp_path, data, capsys, f"model.path={step}") == [f"[sft] weights from {step}"]


def test_a_resumed_run_or_a_model_dir_says_no_weights_line(made, tmp_path, capsys):
    root, data = made
    exported = tmp_path / "model"
    code, stdout, err = run_cli("ckpt", "export-hf", root / "A", "--out", exported)
    assert code == 0, stdout + err
    assert _started(tmp_path, data, capsys, f"model.path={exported}") == []
    capsys.readouterr()
    run_sft(
        tiny_config(
            data, tmp_path / "run", *SETTINGS, "trainer.total_steps=2", f"model.path={exported}"
        )
    )
    err = capsys.readouterr().err
    assert "(resumed from" in err and "weights from" not in err, err
