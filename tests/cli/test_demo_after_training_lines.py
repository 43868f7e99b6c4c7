"""What the demo says once training finished, and the commands it names there.

- A closed stdout after training (`./dev demo | head -2`: the closed pipe is met by the
  demo's next line, after training) said `stdout closed; the demo stopped at training; OUT
  is incomplete`, of a run whose final step was saved and valid. It now says what a Ctrl-C
  there says: training finished, the run kept, the commands that do what was left.
- Those commands export into the demo's own export dir (OUT/hf); the demo's start over then
  refused it (`a previous demo's output that also holds hf, which the demo did not write`),
  though the same line said `mfsdp demo --out OUT` again starts over. An export there is the
  demo's own now; anything else named hf is still refused.
- Started by `./dev` (which sets MFSDP_DEV), the commands are `./dev mfsdp ...`: `mfsdp` is
  not on PATH until .venv is activated.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli import demo_record
from cli.demo import VALIDATING, _claim, _Phase
from cli.demo_record import EXPORT_DIR
from mfsdp_ckpt.command_as_run import DEV_SCRIPT
from tests.support.fresh_python import mfsdp
from tests.support.paths import REPO


def _left(out: Path, options: str, dev: str = "") -> str:
    """What a demo in `out` given `options` (--steps, --nproc), started through the `./dev`
    script `dev` (or as `mfsdp`), names once training finished: `./dev demo`, as the user
    typed it, and `./dev mfsdp ...`."""
    run, hf = out / "sft", out / "hf"
    mfsdp, demo = (f"{dev} mfsdp", f"{dev} demo") if dev else ("mfsdp", "mfsdp demo")
    return (
        f"`{mfsdp} ckpt validate --deep {run}` validates it, `{mfsdp} ckpt export-hf {run} --out"
        f" {hf} --dtype fp32 --verify` exports it; `{demo} --out {out} {options}` again starts over"
    )


def test_a_closed_stdout_after_training_says_the_run_is_kept_and_its_export_starts_over(
    tmp_path,
):
    out = tmp_path / "d"
    env = {**os.environ, "PYTHONPATH": str(REPO), DEV_SCRIPT: "./dev"}
    demo = subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", "demo", "--out", str(out)]
        + ["--steps", "2", "--nproc", "1"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert demo.stdout is not None
    for line in demo.stdout:  # the reader goes once training started, as `| head -3` does
        if line.startswith("[demo] train: "):
            break
    demo.stdout.close()
    _out, err = demo.communicate(timeout=300)
    assert demo.returncode == 141, err
    # met by the rank's result line, once training finished
    assert err.splitlines()[-1] == (
        "error: stdout closed after training finished (step 2 of 2); its final checkpoint is"
        f" {out / 'sft' / 'global_step_2'}; {_left(out, '--steps 2 --nproc 1', './dev')}"
    )
    # the export it names, then the start over it names: the export is the demo's own
    export = ["ckpt", "export-hf", str(out / "sft"), "--out", str(out / "hf")]
    done = mfsdp(*export, "--dtype", "fp32", "--verify", env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    kept = _claim(out)
    assert kept is not None and (kept / "hf" / "config.json").is_file()


def test_the_commands_are_named_as_the_demo_was_started(tmp_path, monkeypatch):
    out = tmp_path / "d"
    phase = _Phase(out, 8, 1)
    phase.now = VALIDATING
    monkeypatch.delenv(DEV_SCRIPT, raising=False)
    run = out / "sft"
    said = phase.interrupted()
    assert said == (
        f"interrupted while validating the checkpoint; training had finished, its run is kept"
        f" in {run}: {_left(out, '--steps 8 --nproc 1')}"
    )
    assert phase.stopped("stdout closed") == said.replace("interrupted", "stdout closed", 1)
    monkeypatch.setenv(DEV_SCRIPT, "../my clone/dev")
    assert phase.again() == (
        f"`'../my clone/dev' demo --out {out} --steps 8 --nproc 1` again starts over"
    )


def _demo_stopped_after_training(out: Path) -> None:
    """A demo dir as a demo stopped after training leaves it: no export, its list written."""
    (out / "sft" / "global_step_2").mkdir(parents=True)
    demo_record.start(out)
    (out / "sft" / "global_step_2" / "model.bin").write_bytes(b"weights")
    demo_record.record(out)


def _export(folder: Path) -> None:
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"tensors")


@pytest.mark.parametrize(
    "other",
    ["a file beside the export", "a folder in it", "no safetensors", "a link", "a file"],
)
def test_only_an_export_is_taken_for_the_demos_own(tmp_path, other):
    out = tmp_path / "d"
    _demo_stopped_after_training(out)
    hf = out / EXPORT_DIR
    if other == "a link":
        _export(tmp_path / "elsewhere")
        hf.symlink_to(tmp_path / "elsewhere")
    elif other == "a file":
        hf.write_text("notes")
    else:
        _export(hf)
    if other == "a file beside the export":
        (hf / "notes.txt").symlink_to(tmp_path)
    elif other == "a folder in it":
        (hf / "mine").mkdir()
    elif other == "no safetensors":
        (hf / "model.safetensors").unlink()
    problem = demo_record.refusal(out)
    assert str(problem) == (
        f"{out}: a previous demo's output that also holds hf, which the demo did not write and"
        " will not delete; move it elsewhere, or choose a new --out"
    )
    assert hf.exists() or hf.is_symlink()


def test_an_export_there_is_the_demos_own(tmp_path):
    out = tmp_path / "d"
    _demo_stopped_after_training(out)
    _export(out / EXPORT_DIR)
    assert demo_record.refusal(out) is None
    (out / "notes.txt").write_text("mine")  # anything else still is not
    assert "also holds notes.txt" in str(demo_record.refusal(out))
