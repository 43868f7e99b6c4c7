"""`mfsdp demo` starts over only in a directory holding exactly what a demo wrote, and only
in one it may: a rerun deleted the steps a user had trained on from the demo's run (the
check looked at the top-level names alone), emptied the current directory given as `--out .`,
failed with rmtree's words on a symlink, and wrote its data into a checkpoint step. A Ctrl-C
names what is kept and how to go on; the answer's line says what a few steps can show."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import demo_record
from cli.demo import _claim, _Phase, _what_to_expect
from cli.demo_record import MARKER as DEMO_MARKER
from cli.main import app
from mfsdp_ckpt.storage.out_lock import acquire_out_lock, release_out_lock


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """What `mfsdp demo --steps 2 --nproc 1` writes (steps 1 and 2 saved), made once."""
    out = tmp_path_factory.mktemp("demo") / "demo"
    done = CliRunner().invoke(app, ["demo", "--out", str(out), "--steps", "2", "--nproc", "1"])
    assert done.exit_code == 0, done.output
    return out


@pytest.fixture
def previous(made, tmp_path) -> Path:
    """A copy of the demo's dir, as a rerun finds it."""
    return Path(shutil.copytree(made, tmp_path / "demo", symlinks=True))


def _demo(*args: str) -> tuple[int, str]:
    """`mfsdp demo ARGS`, at 1 step on 1 process where ARGS give neither (an option once)."""
    defaults = [
        item
        for pair in (("--steps", "1"), ("--nproc", "1"))
        if pair[0] not in args
        for item in pair
    ]
    done = CliRunner().invoke(app, ["demo", *defaults, *args])
    return done.exit_code, done.stderr


def _listing(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def test_the_demo_lists_every_folder_and_file_it_wrote(made):
    written = demo_record._read(made)
    assert isinstance(written, demo_record.Written)
    files = {str(p.relative_to(made)) for p in made.rglob("*") if p.is_file()} - {DEMO_MARKER}
    assert set(written.files) == files
    assert "sft/global_step_2/dist_ckpt" in written.dirs
    assert demo_record.refusal(made) is None


def test_steps_trained_on_from_the_demos_run_are_never_deleted(previous):
    """`mfsdp train sft --config OUT/sft/config.yaml trainer.total_steps=N` adds steps and a
    config.until_step_N.yaml inside sft/, a name the demo writes."""
    shutil.copytree(previous / "sft" / "global_step_2", previous / "sft" / "global_step_3")
    (previous / "sft" / "config.until_step_2.yaml").write_text("trainer: {}\n")
    before = _listing(previous)
    code, err = _demo("--out", str(previous))
    assert code == 2, err
    assert err == (
        f"error: {previous}: a previous demo's output that also holds"
        " sft/config.until_step_2.yaml, sft/global_step_3, which the demo did not write and"
        " will not delete; move it elsewhere, or choose a new --out\n"
    )
    assert _listing(previous) == before


def test_a_file_changed_since_the_demo_wrote_it_is_never_deleted(previous):
    data = previous / "gsm8k_format" / "train.jsonl"
    data.write_bytes(data.read_bytes().replace(b"apples", b"pears!"))  # same size
    code, err = _demo("--out", str(previous))
    assert code == 2, err
    assert "gsm8k_format/train.jsonl has other bytes than the demo wrote" in err
    assert b"pears!" in data.read_bytes()


def test_a_demo_that_wrote_no_list_is_never_deleted(previous):
    """A demo killed before it ended (or one of an older mfsdp) left no list."""
    (previous / DEMO_MARKER).write_text("written by mfsdp demo: the next demo run replaces it\n")
    code, err = _demo("--out", str(previous))
    assert code == 2, err
    assert "a previous demo's output without the list of what it wrote" in err
    assert (previous / "sft" / "global_step_2").is_dir()


def test_a_demo_dir_a_training_run_is_using_is_named_as_such(previous):
    held = acquire_out_lock(previous / "sft")  # as `mfsdp train sft` holds it while it trains
    try:
        code, err = _demo("--out", str(previous))
    finally:
        release_out_lock(previous / "sft", held)
    assert code == 1, err
    assert err == (
        f"error: {previous}: a training run (pid {os.getpid()}) is using {previous / 'sft'};"
        " the demo will not delete it: wait for the run to end, or choose a new --out\n"
    )


def test_exactly_what_a_demo_wrote_is_replaced(previous):
    _claim(previous)
    assert _listing(previous) == [DEMO_MARKER]


def test_the_current_directory_is_refused_and_left_whole(previous, monkeypatch):
    monkeypatch.chdir(previous)
    before = _listing(previous)
    for given in (".", str(previous), str(previous.parent)):
        code, err = _demo("--out", given)
        assert code == 2 and "is the current directory or above it" in err, err
        assert err.count("\n") == 1
    assert _listing(previous) == before


def test_a_symlink_is_refused_in_one_line(previous, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(previous)
    code, err = _demo("--out", str(link))
    assert (code, err) == (
        2,
        f"error: {link}: is a symlink; give the real path (links are not replaced)\n",
    )
    assert (previous / "sft" / "global_step_2").is_dir()


def test_an_out_inside_a_checkpoint_is_refused_before_anything_is_written(previous):
    step = previous / "sft" / "global_step_2"
    before = _listing(step)
    code, err = _demo("--out", str(step / "newdir"))
    assert code == 2, err
    assert err == (
        f"error: --out {step / 'newdir'}: lies inside the checkpoint {step}; the demo's files"
        " would be mixed into it, choose an --out outside it\n"
    )
    assert _listing(step) == before


def test_ctrl_c_names_the_checkpoint_kept_and_how_to_resume_it(previous):
    phase = _Phase(previous, 80, 2)
    phase.now = "train"
    run = previous / "sft"
    assert phase.interrupted() == (
        "interrupted after step 2 or later (trainer.log_every=5); the newest checkpoint is"
        f" {run / 'global_step_2'}: run"
        f" `mfsdp train sft --config {run / 'config.yaml'}` to resume from it;"
        f" `mfsdp demo --out {previous}` again starts over"
    )
    phase.now = "data"
    assert phase.interrupted() == (
        f"interrupted while writing the demo's data and model; `mfsdp demo --out {previous}`"
        " again starts over"
    )


def test_an_answer_without_the_format_says_the_model_is_untrained():
    assert "has not learnt the answer's format yet" in _what_to_expect(" " * 32, 4)
    assert "expect the answer's format" in _what_to_expect("3 + 4 = 7\n#### 7", 80)


def test_too_many_processes_are_named_by_the_demos_own_option(tmp_path, monkeypatch, caplog):
    """The note said "--nproc-per-node 2 or fewer runs faster", an option the demo lacks."""
    import cli.demo
    from trainer import threads

    monkeypatch.delenv(threads.CHOSEN_MARKER, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "available_cores", lambda: [0])
    monkeypatch.setattr(cli.demo, "run_ranks", lambda *args, **kwargs: 1)  # no training
    with caplog.at_level(logging.WARNING, logger="mfsdp.threads"):
        code, _ = _demo("--out", str(tmp_path / "d"), "--nproc", "2")
    assert code == 1
    notes = [r.getMessage() for r in caplog.records if r.name == "mfsdp.threads"]
    assert any("(on CPU, --nproc 1 or fewer runs faster)" in note for note in notes), notes
