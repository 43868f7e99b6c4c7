"""`mfsdp demo`: the whole product on a tiny model, on CPU, with nothing downloaded.

Data in GSM8K's official format -> `mfsdp data gsm8k` -> `mfsdp train sft` (FSDP2, two
processes under torchrun) -> `mfsdp ckpt validate --deep` -> `mfsdp ckpt export-hf` ->
reload the export with transformers and answer a question. Each stage is the library call
behind the matching command, so the demo exercises what users run.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

import click

from cli import demo_record
from cli.demo_record import DATA_DIR, DEMO_DIR, EXPORT_DIR, INIT_DIR, RAW_DIR, RUN_DIR
from cli.errors import GivenPath, on_interrupt
from cli.given_once import OnceCommand
from cli.launch import CONFIG_CHECKED, end_as_ranks_ended, run_ranks
from cli.main import EXIT_CLOSED_PIPE
from cli.run_report import stopped_run_line
from mfsdp_ckpt.command_as_run import mfsdp_command
from mfsdp_ckpt.errors import MfsdpFailedError, MfsdpUsageError
from mfsdp_ckpt.format.output_inside import inside_checkpoint
from mfsdp_ckpt.storage.named_writes import write_bytes
from mfsdp_ckpt.storage.out_dir import checked_target as checked_out_path
from mfsdp_ckpt.storage.out_lock import ctrl_c_deferred, out_lock
from mfsdp_ckpt.storage.writable import require_writable_dir
from trainer.override_text import folded_character, quoted

if TYPE_CHECKING:
    from transformers import BatchEncoding

EXAMPLE_CONFIG = Path(__file__).resolve().parents[1] / "examples" / "sft_tiny_cpu.yaml"
DEFAULT_NPROC, DEFAULT_STEPS = 2, 80  # --nproc, --steps: what a start-over command leaves out


@click.command(cls=OnceCommand, short_help="Tiny end-to-end run on CPU: train, check, export.")
@click.option(
    "--out",
    "out_dir",
    metavar="DIR",
    type=GivenPath(file_okay=False, output=True),
    default=DEMO_DIR,
    show_default=True,
    help="Demo directory: new, empty, or a previous demo's holding only what that demo wrote"
    " (which is replaced).",
)
@click.option(
    "--nproc",
    type=click.IntRange(1, 8),
    default=DEFAULT_NPROC,
    show_default=True,
    help="Training processes (under torchrun, with gloo on CPU).",
)
@click.option(
    "--steps",
    type=click.IntRange(1),
    default=DEFAULT_STEPS,
    show_default=True,
    help="SFT optimizer steps.",
)
def demo(out_dir: str, nproc: int, steps: int) -> None:
    """Train a tiny Qwen2-shaped model on synthetic GSM8K-style data on CPU, checkpoint it,
    validate the checkpoint, export it to Hugging Face safetensors, and generate from it.

    \b
    Example:
      mfsdp demo --out /tmp/mfsdp-demo
    """
    out = Path(out_dir)
    _check_out(out)
    with out_lock(out, "--out"):  # a second demo into `out` meanwhile would delete this one's
        kept = _claim(out)
        phase = _Phase(out, steps, nproc)
        on_interrupt(phase.interrupted)
        try:
            with _stopped_by_closed_stdout(out, phase, kept):
                if kept is not None:
                    _say(f"the previous demo in {out} is kept in {kept} until this one completes")
                _run(out, nproc, steps, phase)
        except BaseException:
            # the list of what it wrote, so that a rerun may replace it; a list that cannot be
            # written leaves the dir unlisted (refused by the next demo), never a wrong one
            with contextlib.suppress(Exception), ctrl_c_deferred():
                demo_record.record(out)
            raise
        with ctrl_c_deferred():
            demo_record.record(out)
            if kept is not None:
                shutil.rmtree(kept)


def _check_out(out: Path) -> None:
    """Refuse, before anything is written, an --out the demo may not create or start over
    in: `.`, the current directory or one above it, a symlink, a file (the demo deletes a
    previous demo's dir whole: `rmtree` of the current directory emptied it, of a link it
    failed with a traceback's words), one it cannot write, and a checkpoint or a dir inside
    one (the demo's data and model were written into a step, which then failed validation),
    and a path holding a control character (a newline split each line naming it in two)."""
    folded = folded_character(str(out))
    if folded is not None:
        raise MfsdpUsageError(
            f"--out {out}: holds a control character ({folded}), which would split every line"
            " naming it; choose a path without one"
        )
    require_writable_dir("--out", out)
    checked_out_path(out)
    inside = inside_checkpoint(out)
    if inside is not None:
        raise MfsdpUsageError(
            f"--out {out}: {inside}; the demo's files would be mixed into it, choose an --out"
            " outside it"
        )


class _Phase:
    """Which phase of the demo in `out` (training `steps` steps on `nproc` processes) runs,
    for the line a Ctrl-C ends it with: what is kept and how to go on (the run's newest
    checkpoint resumes with `mfsdp train sft`; once training finished, the command that
    does the phase stopped and those after it; a rerun of the demo, as it was given,
    starts over)."""

    def __init__(self, out: Path, steps: int, nproc: int):
        self.out, self.steps, self.nproc, self.now = out, steps, nproc, "data"

    def interrupted(self) -> str:
        if self.now == "data":
            return f"interrupted while writing the demo's data and model; {self.again()}"
        return self.stopped("interrupted")

    def stopped(self, how: str) -> str:
        """The line for the demo stopped `how` (`interrupted`, `stdout closed`) once training
        started: what of its run is kept and the commands that go on from there, however the
        demo was stopped (a closed stdout said "OUT is incomplete" of a run whose final step
        was saved and valid)."""
        if self.now == "train":
            return self.training_stopped(how)
        run_dir, hf_dir = self.out / RUN_DIR, self.out / EXPORT_DIR
        if self.now == GENERATING:
            return (
                f"{how} while {self.now}; training and the export had finished: the run"
                f" is kept in {run_dir}, the export in {hf_dir} (it loads with transformers'"
                f" from_pretrained); {self.again()}"
            )
        return (
            f"{how} while {self.now}; training had finished, its run is kept in"
            f" {run_dir}: {self._left()}; {self.again()}"
        )

    def training_stopped(self, stopped: str) -> str:
        """The line for training stopped as `stopped` says (`interrupted`, torchrun killed):
        as `mfsdp train`'s, with the command that resumes the demo's run, or once training
        had finished, the commands that do what the demo had left."""
        run_dir = self.out / RUN_DIR
        return stopped_run_line(
            run_dir,
            LOG_EVERY,
            0,
            stopped,
            resume=f"run {mfsdp_command('train sft --config', run_dir / 'config.yaml')}",
            start_over=self.again(),
            last_step=self.steps,
            then=self._left(),
        )

    def _left(self) -> str:
        """The commands that do what the demo had left after training, from the phase
        stopped on: validating, then exporting (generating has no command of its own). The
        export goes where the demo's own goes, which a rerun of the demo then replaces."""
        run_dir = self.out / RUN_DIR
        export = mfsdp_command(
            "ckpt export-hf", run_dir, "--out", self.out / EXPORT_DIR, "--dtype fp32 --verify"
        )
        if self.now == EXPORTING:
            return f"{export} redoes the export"
        return f"{mfsdp_command('ckpt validate --deep', run_dir)} validates it, {export} exports it"

    def again(self) -> str:
        """The demo's command that starts over, with the --steps and --nproc this one was
        given (where not the defaults): without them, a user who chose 2 steps on 1 process
        to keep it short was told a command training 80 steps on 2."""
        given = [
            f"--{name} {value}"
            for name, value, default in (
                ("steps", self.steps, DEFAULT_STEPS),
                ("nproc", self.nproc, DEFAULT_NPROC),
            )
            if value != default
        ]
        return f"{mfsdp_command('demo --out', self.out, *given)} again starts over"


# The demo's phases after training, as its Ctrl-C line names them
VALIDATING = "validating the checkpoint"
EXPORTING = "exporting the checkpoint"
GENERATING = "generating from the export"
LOG_EVERY = 5  # the demo's trainer.log_every


def _run(out: Path, nproc: int, steps: int, phase: _Phase) -> None:
    """The demo's phases, into the claimed `out`."""
    started = time.monotonic()
    # Each phase that takes seconds says so as it starts (loading torch and transformers alone
    # takes seconds on 2 cores), so the output never sits still without a line.
    _say(f"data: writing GSM8K-format rows, converting them, building a tiny model in {out} ...")
    _quiet_model_loading()
    from mfsdp_ckpt.check.validate import validate_checkpoint
    from mfsdp_ckpt.convert.export_hf import export_hf
    from mfsdp_ckpt.convert.units import human_bytes
    from trainer.data.math_datasets import convert_files
    from trainer.tiny import build_tiny_model_dir, synthetic_arithmetic

    raw = out / RAW_DIR / "train.jsonl"
    raw.parent.mkdir(parents=True)
    rows = synthetic_arithmetic(320, seed=7)
    write_bytes(
        raw,
        "".join(
            json.dumps({"question": r["question"], "answer": r["answer"]}) + "\n" for r in rows
        ).encode(),
    )
    tables = convert_files("gsm8k", [str(raw)], out / DATA_DIR)
    model_dir = build_tiny_model_dir(out / INIT_DIR, with_weights=True)
    _say(
        f"data: {tables['sft/train']} (SFT) and {tables['rl/train']} (RL); initial model: "
        f"{model_dir}"
    )

    run_dir = out / RUN_DIR
    overrides = [  # paths quoted: `--out 'runs/demo #2'` is no YAML comment
        f"model.path={quoted(str(model_dir))}",
        f"data.train_files={quoted(str(tables['sft/train']))}",
        f"trainer.run_dir={quoted(str(run_dir))}",
        f"trainer.total_steps={steps}",
        "data.global_batch_size=16",
        f"checkpoint.save_every={max(1, steps // 2)}",
        "trainer.progress_bar=false",
        f"trainer.log_every={LOG_EVERY}",
        f"trainer.eval_every={max(1, steps // 2)}",
    ]
    # under torchrun for one process too: a rank leaves a Ctrl-C to the launching process to
    # say, and a lone `cli.train` said its own line ("run the same command again", a command
    # the user never typed) before the demo's
    command = [
        sys.executable,
        "-m",
        "cli.torchrun",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "cli.train",
        "sft",
        "--config",
        str(EXAMPLE_CONFIG),
        *overrides,
    ]
    # the stage is training from its first line on: a Ctrl-C while the import below loads
    # torch (seconds) said "while writing the demo's data and model" under "train:"
    phase.now = "train"
    _say(f"train: {nproc} process(es), FSDP2 on CPU, {steps} steps")
    from trainer.threads import configure_threads

    # chosen here, as `mfsdp train` chooses for the ranks it launches (they inherit it): a
    # pinned OMP_NUM_THREADS=1 read to them as the user's, whom `-v` told to unset it
    configure_threads(nproc, ranks_option="--nproc")
    env = dict(os.environ)
    env[CONFIG_CHECKED] = "1"  # as under `mfsdp train`: one line for a mistake or a Ctrl-C
    # in the user's directory (`--out` may be relative); the ranks' result is not the demo's
    code = run_ranks(command, ends_command=False, env=env)
    end_as_ranks_ended(code, phase.training_stopped)  # as `mfsdp train` ends
    phase.now = VALIDATING

    _say(f"validate --deep {run_dir}: hashing every file, reading every tensor ...")
    report = validate_checkpoint(run_dir, deep=True)
    for finding in report.findings:
        _say(f"validate: {finding}")
    _say(f"validate --deep {run_dir}: {'valid' if report.ok() else 'INVALID'}")
    if not report.ok():
        raise SystemExit(1)

    hf_dir = out / EXPORT_DIR
    phase.now = EXPORTING
    _say(f"export-hf: {run_dir} -> {hf_dir}, then reading it back (--verify) ...")
    result = export_hf(run_dir, hf_dir, dtype="fp32", verify=True)
    if result.mismatches:
        _say(f"export-hf: {len(result.mismatches)} tensor(s) differ from the checkpoint")
        raise SystemExit(1)
    _say(f"export-hf: {result.tensors} tensors, {human_bytes(result.bytes)} -> {hf_dir} (verified)")

    phase.now = GENERATING
    question = synthetic_arithmetic(1, seed=99)[0]["question"]
    _say(f"generate: loading {hf_dir} with transformers, answering {question!r} ...")
    answer = _generate(hf_dir, question)
    _say(f"generate: {question!r} -> {answer!r}")
    _say(f"  {_what_to_expect(answer, steps)}")
    _say(
        f"done in {time.monotonic() - started:.0f}s; run: {run_dir}, export: {hf_dir}; next:"
        f" {mfsdp_command('ckpt inspect', run_dir)}"
    )


def _quiet_model_loading() -> None:
    """transformers draws a bar for every model it writes or loads (here four, two of them
    from the ranks at once): they came between the demo's own lines. The variable reaches the
    ranks; this process may have loaded transformers already, so its switch is used too."""
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()


def _claim(out: Path) -> Path | None:
    """Make `out` an empty demo dir. A previous demo's output is replaced when it holds
    exactly what that demo wrote (`demo_record`); any other non-empty directory is refused,
    since what is in it is not the demo's to delete: a user's files, or steps a user trained
    on from the demo's run. The previous demo is moved beside `out` (`_kept_dir`), returned,
    and deleted once this demo completes: deleted at the start, a complete demo was lost to
    one that then stopped part way (a Ctrl-C, `mfsdp demo | head`). Where one is kept
    already (the demo after it stopped part way), `out` holds that stopped one: deleted."""
    kept = _kept_dir(out)
    if out.is_dir() and any(out.iterdir()):
        problem = demo_record.refusal(out)
        if problem is not None:
            raise problem
        if _holds_kept_demo(kept):
            shutil.rmtree(out)
        else:
            out.rename(kept)
    out.mkdir(parents=True, exist_ok=True)
    demo_record.start(out)
    return kept if _holds_kept_demo(kept) else None


def _kept_dir(out: Path) -> Path:
    """Where the previous demo in `out` waits while a new one runs: beside it, hidden."""
    return out.parent / f".{out.name}.demo-previous"


def _holds_kept_demo(kept: Path) -> bool:
    """Whether `kept` is a previous demo's dir a demo moved there: a directory (no link)
    holding exactly what a demo wrote; anything else of that name is refused, not deleted."""
    if not os.path.lexists(kept):
        return False
    if kept.is_symlink() or not kept.is_dir() or demo_record.refusal(kept) is not None:
        raise MfsdpUsageError(
            f"{kept}: is where the demo keeps the previous demo in --out while it runs, and"
            " holds something else; move it away"
        )
    return True


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reading end is closed (poll reports an error on it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _fd, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no descriptor (a test's captured stdout)
        return False


@contextlib.contextmanager
def _stopped_by_closed_stdout(out: Path, phase: _Phase, kept: Path | None) -> Iterator[None]:
    """Stop the demo once its stdout is closed (`mfsdp demo | head -2`) with 141, as every
    command ends there (docs/json.md), and, unlike them, one line on stderr: its directory
    is left half built, so the line names the stage, what is kept and that running it
    again starts over (it ended with exit 1 and no word; then with exit 1, which says the
    demo failed); once training started, it is a Ctrl-C's there (`_Phase.stopped`). The
    closed pipe is met by the demo's own line, or by the training rank's result line
    (which then fails, and the demo with it). stdout is pointed at /dev/null first, so that
    Python's flush at exit adds no "Exception ignored" lines."""
    try:
        yield
    except (BrokenPipeError, SystemExit) as err:
        if isinstance(err, SystemExit) and (not err.code or not _stdout_closed()):
            raise
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        previous = f" (the previous demo is kept in {kept})" if kept is not None else ""
        if phase.now != "data":
            raise _StdoutClosed(phase.stopped("stdout closed") + previous) from None
        raise _StdoutClosed(
            f"stdout closed; the demo stopped at writing the data and model; {out} is"
            f" incomplete{previous}; {phase.again()}"
        ) from None


class _StdoutClosed(MfsdpFailedError):
    """The demo's stdout reader went away: exit 141, as a closed pipe ends every command."""

    exit_code = EXIT_CLOSED_PIPE


def _what_to_expect(answer: str, steps: int) -> str:
    """What the generated answer shows: a tiny model that learnt the answer's format (GSM8K's
    `#### N` line) in its steps, or one too little trained to have (4 steps answered 32
    spaces, under a line that said to expect the answer's format)."""
    if "####" in answer:
        return (
            "(a tiny model after a short run: expect the answer's format, not a correct sum;"
            " the pipeline, not the model, is the point)"
        )
    return (
        f"(after {steps} step(s) the tiny model has not learnt the answer's format yet:"
        f" the default --steps {DEFAULT_STEPS} learns it)"
    )


def _generate(model_dir: Path, question: str) -> str:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.tiny import GSM8K_SUFFIX

    local = dict(local_files_only=True, trust_remote_code=False)  # its files are data
    tokenizer = AutoTokenizer.from_pretrained(model_dir, **local)
    model = AutoModelForCausalLM.from_pretrained(model_dir, use_safetensors=True, **local).eval()
    prompt = cast(
        "BatchEncoding",  # return_dict=True; the stubs' overloads do not say so
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"{question} {GSM8K_SUFFIX}"}],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        ),
    )
    with torch.no_grad():
        output = model.generate(**prompt, max_new_tokens=32, do_sample=False)
    answer = output[0, prompt["input_ids"].shape[1] :]
    return cast(str, tokenizer.decode(answer, skip_special_tokens=True))  # one sequence: a str


def _say(message: str) -> None:
    click.echo(f"[demo] {message}")
