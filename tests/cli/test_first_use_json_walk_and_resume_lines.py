"""What a first-time user scripting mfsdp, or stopping a run, still met: every command that
takes `--json` walked with an input it must refuse and one it must accept (stdout one JSON
object either way, exit 1 or 2 as the rules say), and a run stopped by Ctrl-C that said only
"interrupted", not which checkpoint the next run resumes from."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import click
import pytest

from cli.main import app
from tests.support.cli_errors import lines_besides_starting
from tests.support.fresh_python import mfsdp
from tests.support.launched_sft import lines_until_step, step_reached, train_until_stopped
from tests.support.metrics import read_metrics
from tests.support.one_python import mfsdp_each
from tests.support.paths import FIXTURES
from tests.support.sft import write_chat_jsonl

RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"

# ------------------------------------------------------------------ --json, every command


def _json_commands(command: click.Command = app, path: tuple[str, ...] = ()) -> set[tuple]:
    """The words of every runnable command that takes --json, from the command tree itself,
    so a command added later is walked too."""
    if isinstance(command, click.Group):
        return {
            found
            for name, sub in command.commands.items()
            for found in _json_commands(sub, (*path, name))
        }
    return {path} if any("--json" in param.opts for param in command.params) else set()


def _damaged_run(tmp: Path) -> Path:
    """The fixture run with one of its data files cut short: a check that must fail."""
    run = tmp / "damaged"
    shutil.copytree(RUN, run)
    with open(run / "global_step_2" / "dist_ckpt" / "__0_1.distcp", "r+b") as handle:
        handle.truncate(100)
    return run


def _broken_hf_dir(tmp: Path) -> Path:
    hf = tmp / "hf"
    hf.mkdir()
    (hf / "config.json").write_text('{"model_type": "qwen2"}')
    (hf / "model.safetensors").write_text("not safetensors\n")
    return hf


# command -> (its arguments that it must refuse, given a tmp dir; the exit code they earn).
# A refusal is the error object, except where the command's result is itself the verdict:
# validate's report, with its findings and "valid": false.
REPORTS_FINDINGS = {("ckpt", "validate")}
REFUSED = {
    ("ckpt", "inspect"): (lambda tmp: [str(tmp / "missing")], 2),
    ("ckpt", "validate"): (lambda tmp: [str(_damaged_run(tmp))], 1),
    ("ckpt", "export-hf"): (lambda tmp: [str(_damaged_run(tmp)), "--out", str(tmp / "o")], 1),
    ("ckpt", "import-hf"): (lambda tmp: [str(_broken_hf_dir(tmp)), "--out", str(tmp / "o")], 1),
    ("train", "sft"): (lambda tmp: [f"data.train_files={tmp / 'missing.jsonl'}"], 2),
    ("config", "check"): (lambda tmp: ["sft", f"data.train_files={tmp / 'missing.jsonl'}"], 2),
    ("train", "grpo"): (lambda tmp: [f"model.path={tmp / 'missing'}"], 2),
    ("data", "gsm8k"): (lambda tmp: ["--input", str(tmp / "missing"), "--out", str(tmp)], 2),
    ("data", "math"): (lambda tmp: ["--input", str(tmp), "--out", str(tmp / "o")], 2),
    ("data", "synthetic"): (lambda tmp: ["--out", str(tmp), "--seed", "one"], 2),
}


def _one_json_object(stdout: str) -> dict:
    """stdout parsed as exactly one JSON object (json.loads refuses anything after it)."""
    reply = json.loads(stdout)
    assert isinstance(reply, dict), stdout
    return reply


def test_every_json_command_has_a_refused_input_here():
    assert _json_commands() == set(REFUSED)


@pytest.mark.parametrize("words", sorted(REFUSED), ids=" ".join)
def test_a_refused_input_under_json_is_one_json_object_and_exit_1_or_2(tmp_path, words):
    arguments, code = REFUSED[words]
    done = mfsdp(*words, *arguments(tmp_path), "--json")
    assert done.returncode == code, done.stderr
    reply = _one_json_object(done.stdout)
    if words in REPORTS_FINDINGS:
        assert reply["valid"] is False and reply["findings"], reply
        return
    assert reply["exit_code"] == code and reply["error"], reply
    assert lines_besides_starting(done.stderr) == [f"error: {reply['error']}"]


def test_the_ckpt_and_data_commands_succeed_with_one_json_object(tmp_path):
    """In order (import-hf reads what export-hf wrote), in one interpreter (`mfsdp_each`):
    each loads torch; the refusals above are each a process of their own."""
    shutil.copytree(RUN, tmp_path / "run")
    run, hf = str(tmp_path / "run"), str(tmp_path / "hf")
    commands = [
        ["ckpt", "inspect", run],
        ["ckpt", "validate", run, "--deep"],
        ["ckpt", "export-hf", run, "--out", hf, "--verify"],
        ["ckpt", "import-hf", hf, "--out", str(tmp_path / "imported")],
        ["data", "synthetic", "--out", str(tmp_path / "data")],
    ]
    ran = mfsdp_each({" ".join(words[:2]): [*words, "--json"] for words in commands})
    for words, done in ran.items():
        assert done.returncode == 0, (words, done.stderr)
        assert "error" not in _one_json_object(done.stdout), words


# ------------------------------------------------------------------ Ctrl-C says how to resume


def _stop_after(process, step: int) -> tuple[str, str]:
    """Ctrl-C, as a terminal sends it to every process of the run, once `step` has been
    logged; the run's stdout, and its stderr after it."""
    lines_until_step(process, step)
    os.killpg(process.pid, signal.SIGINT)
    return process.communicate(timeout=120)


def test_ctrl_c_before_any_save_says_no_checkpoint_was_saved(tmp_path):
    process = train_until_stopped(
        tmp_path,
        "checkpoint.save_every=0",
        nproc=1,
    )
    _out, rest = _stop_after(process, 1)
    assert process.returncode == 130, rest
    reached = max(record["step"] for record in read_metrics(tmp_path / "run"))
    assert lines_besides_starting(rest) == [
        f"error: interrupted after step {reached}; no checkpoint was saved in"
        f" {tmp_path / 'run'} yet"
    ]


def test_ctrl_c_with_resume_disabled_says_how_to_resume_the_newest_checkpoint(tmp_path):
    from mfsdp_ckpt.format import run_steps

    process = train_until_stopped(
        tmp_path,
        "checkpoint.save_every=1",
        "checkpoint.resume=disable",
        "--json",
        nproc=1,
    )
    out, rest = _stop_after(process, 2)
    assert process.returncode == 130, rest
    newest_step = run_steps.read_tracker(tmp_path / "run")
    newest = tmp_path / "run" / f"global_step_{newest_step}"
    reached = max(record["step"] for record in read_metrics(tmp_path / "run"))
    stopped_after = step_reached(tmp_path / "run", reached, newest_step, 1)
    said = (
        f"interrupted{stopped_after}; the newest checkpoint is"
        f" {newest}: run it again with checkpoint.resume=auto to resume from it"
    )
    assert lines_besides_starting(rest) == [f"error: {said}"]
    assert json.loads(out) == {"error": said, "exit_code": 130}


# ------------------------------------------------------------------ a run_dir that is a step


def _listing(directory: Path) -> list[str]:
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*"))


@pytest.mark.parametrize(
    "where, what",
    [
        ("global_step_2", "is a checkpoint"),
        ("global_step_2/dist_ckpt/run", "lies in the checkpoint {run}/global_step_2/dist_ckpt"),
        # a step the run has not saved: was "is a checkpoint", where there is none
        (
            "global_step_9",
            "is the name of a checkpoint step of the run {run} (its saves write there; none is"
            " saved there now)",
        ),
    ],
)
def test_a_run_dir_that_is_or_lies_in_a_step_is_refused_naming_the_run(tmp_path, where, what):
    """`trainer.run_dir=RUN/global_step_2`, typed for the run that holds it, made a new run
    inside the step, starting from nothing, its checkpoints among the step's files."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    before = _listing(run)
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=48)
    overrides = [f"data.train_files={data}", f"trainer.run_dir={run / where}"]
    done = mfsdp("train", "sft", *overrides, "trainer.total_steps=1")
    assert done.returncode == 2, done.stderr
    what = what.format(run=run)
    assert lines_besides_starting(done.stderr) == [
        f"error: trainer.run_dir: {run / where} {what}; give trainer.run_dir={run} to resume "
        "the run it belongs to"
    ]
    assert _listing(run) == before


def test_a_second_run_into_the_same_run_dir_says_the_step_it_resumes_from(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=48)
    run = tmp_path / "run"
    common = ["train", "sft", "--config", "examples/sft_tiny_cpu.yaml", f"trainer.run_dir={run}"]
    common += [f"data.train_files={data}", "trainer.progress_bar=false", "trainer.eval_every=0"]
    # one after the other in one interpreter (`mfsdp_each`), as a sweep runs them: each
    # loaded torch and transformers in a process of its own before
    ran = mfsdp_each(
        {"first": [*common, "trainer.total_steps=2"], "second": [*common, "trainer.total_steps=3"]}
    )
    first, second = ran["first"], ran["second"]
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    header = [line for line in second.stderr.splitlines() if " steps " in line]
    assert len(header) == 1 and header[0].endswith(
        f", steps 2 -> 3 (resumed from {run / 'global_step_2'})"
    ), second.stderr


@pytest.mark.parametrize(
    "stop_at_step, key, end",
    [(None, "trainer.total_steps", 12), (15, "trainer.stop_at_step", 15)],
)
def test_a_run_resumed_past_its_last_step_says_nothing_is_left_to_train(
    capsys, stop_at_step, key, end
):
    """The line said "steps 20 -> 12" for a run dir trained further by an earlier command."""
    from types import SimpleNamespace

    from trainer.runner import TrainingRun

    step_dir = Path("runs/sft_tiny/global_step_20")
    total_steps = 12 if stop_at_step is None else 30
    trainer = SimpleNamespace(stop_at_step=stop_at_step, total_steps=total_steps, epochs=1)
    run = TrainingRun(
        name="sft",
        cfg=SimpleNamespace(trainer=trainer),
        env=SimpleNamespace(is_main=True),
        run_dir=step_dir.parent,
        total_steps=total_steps,
        checkpointer=None,
        states={},
        resume=SimpleNamespace(step_dir=step_dir, root=step_dir),
        hf_assets=lambda _dir: None,
        start=20,
    )
    run.announce("fsdp2 on 1 x cpu")
    assert capsys.readouterr().err == (
        f"[sft] fsdp2 on 1 x cpu; {step_dir} is at step 20 and {key}={end}: nothing left to "
        f"train (raise {key} to train on, or give another trainer.run_dir to start afresh)\n"
    )
