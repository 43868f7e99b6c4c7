"""What the launching process tells the user about a run: the line a stopped run ends with
(the step it reached, the checkpoint the next run resumes from and how), and a finished
run's result, as a line or as JSON with --json. Kept apart from starting the run
(cli/launch.py): `mfsdp demo` says its stopped training the same way.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, NamedTuple

import click

from cli.errors import settle_command
from cli.json_text import json_text
from cli.lines import say
from cli.result_said import mark_result_said
from mfsdp_ckpt.command_as_run import mfsdp_command
from trainer.env_ints import process_rank


def interrupted_run(
    cfg: Any, logged_before: int, stopped: str = "interrupted", every_machine: bool = False
) -> str:
    """What a run stopped by Ctrl-C (or `stopped` otherwise) ends with: the step it reached,
    the checkpoint the next run resumes from and how to resume it (`stopped_run_line`;
    `every_machine`: a run across several machines, each of whose commands is started again)."""
    from trainer.run_ended import resume_words

    again = resume_words(cfg.checkpoint.resume, every_machine)
    return stopped_run_line(
        cfg.trainer.run_dir,
        cfg.trainer.log_every,
        logged_before,
        stopped,
        resume=again,
        last_step=last_step(cfg),
        save_every=cfg.checkpoint.save_every,
    )


def last_step(cfg: Any) -> int | None:
    """The step a run of `cfg` ends at (`trainer.config.end_step`), or None when it is known
    only once the data is read (`trainer.total_steps=0`: so many epochs). With
    `trainer.steps_within_epochs` the run may end sooner, at its last epoch's end, which the
    data decides: this is then the most it trains, so a checkpoint there still proves that
    training finished (`stopped_run_line`); one before it is told how to resume, and the
    resumed run says itself when nothing is left (None would say that of both)."""
    from trainer.config import end_step

    total = cfg.trainer.total_steps
    return end_step(total, cfg) if total else None


def stopped_run_line(
    run_dir: str | os.PathLike,
    log_every: int,
    logged_before: int,
    stopped: str,
    *,
    resume: str,
    start_over: str = "",
    last_step: int | None = None,
    then: str = "",
    save_every: int = 0,
) -> str:
    """`stopped`, the step the run in `run_dir` reached and the checkpoint the next run
    resumes from, `resume` saying how (`run the same command again`), read from the run dir
    as the ranks left it (the launching process never sees their steps: the step is the
    newest that rank 0 logged to metrics.jsonl past byte `logged_before`, every `log_every`
    steps; a checkpoint counts once complete, as `checkpoint.resume=auto` counts it).
    `start_over`: what else the user may do, said last (the demo: run it again).

    When that checkpoint is at or past the run's `last_step` (None: not known), training had
    finished and what was stopped came after it: the line says so, and `then` what is left
    to do (resuming would only start up to say there is nothing left to train).
    `save_every` (`checkpoint.save_every`, 0: not known) names a step reached whose save
    was cut short, and whether its unfinished dir is left (`_cut_save`)."""
    from mfsdp_ckpt.errors import MfsdpError
    from mfsdp_ckpt.format import layout, run_steps

    also = f"; {start_over}" if start_over else ""
    try:
        step = run_steps.resume_step(run_dir)
    except (MfsdpError, OSError):  # a damaged tracker: the next run says so itself
        return stopped + _step_reached(run_dir, log_every, logged_before) + also
    if step is not None and last_step is not None and step >= last_step:
        left = f"; {then}" if then else ""
        # a checkpoint past it: a resume after the end was lowered ("step 4 of 3" was said)
        reached = f" of {last_step}" if step == last_step else f", past its last step {last_step}"
        return (
            f"{stopped} after training finished (step {step}{reached}); its final"
            f" checkpoint is {layout.step_dir(run_dir, step)}{left}{also}"
        )
    stopped += _step_reached(run_dir, log_every, logged_before, save_every, step)
    if step is None:
        return f"{stopped}; no checkpoint was saved in {run_dir} yet{also}"
    return (
        f"{stopped}; the newest checkpoint is {layout.step_dir(run_dir, step)}: "
        f"{resume} to resume from it{also}"
    )


def _step_reached(
    run_dir: str | os.PathLike,
    log_every: int,
    logged_before: int,
    save_every: int = 0,
    newest: int | None = None,
) -> str:
    """` after step N` (`... or later` when steps are logged every few), or "" when the run
    logged no step (stopped while starting). A step N that `save_every` saves, newer than
    the `newest` checkpoint, was stopped in its save (a step is logged before it is saved):
    the line says so, since "after step 5" beside save_every=5 reads as a step-5 checkpoint."""
    from trainer.metrics import last_logged_step

    step = last_logged_step(run_dir, logged_before)
    if not step:  # none, or GRPO's step-0 validation: no step was trained
        return ""
    later = f" or later (trainer.log_every={log_every})" if log_every > 1 else ""
    unsaved = log_every == 1 and save_every > 0 and step % save_every == 0 and (newest or 0) < step
    cut = f" ({_cut_save(run_dir, step)})" if unsaved else ""
    return f" after step {step}{later}{cut}"


def _cut_save(run_dir: str | os.PathLike, step: int) -> str:
    """What step `step`'s cut save left, as the run dir holds it: the ranks remove their
    unfinished `global_step_N.tmp` when one of them fails, but ranks killed with their
    launcher (SIGKILL) remove nothing, and "removed" was said of a dir still on disk."""
    from mfsdp_ckpt.format import layout

    tmp = layout.tmp_step_dir(run_dir, step)
    if os.path.lexists(tmp):
        return f"step {step}'s save was cut short; what it wrote is left in {tmp}, no checkpoint"
    return f"step {step}'s save was cut short and removed"


def report(summary: dict[str, Any], as_json: bool, line: str) -> None:
    """Print a finished run's summary once, from rank 0 (`process_rank`: a process given RANK
    without WORLD_SIZE trained alone, as rank 0): as one JSON object with --json, else as
    `line`. The outcome is settled first
    (`settle_command`: a signal from here on changes nothing), and a launching `mfsdp`
    is told once it is printed (`mark_result_said`)."""
    settle_command()
    if process_rank() != 0:
        return
    if as_json:
        click.echo(json_text(summary))
    else:
        say(line)
    mark_result_said()


def final_value(result: Any, by_step: dict[int, float], key: str) -> float | None:
    """The newest value of a per-step series of `result`: this invocation's, or where it
    logged none (a rerun of a finished run, "nothing left to train"; a resume whose steps
    held no validation) the newest the run logged under `key` in its metrics.jsonl at or
    before its final step, as docs/json.md defines the field: a script rerunning an
    idempotent train command got null. None when the run never logged one."""
    if by_step:
        return by_step[max(by_step)]
    return _logged_value(Path(result.run_dir), key, result.final_step)


def _logged_value(run_dir: Path, key: str, up_to: int) -> float | None:
    """`key`'s value in the newest record of `run_dir`'s metrics.jsonl at or before step
    `up_to` that holds a number for it; None when none does or the file cannot be read."""
    from trainer.metrics import logged_records

    found: float | None = None
    try:
        for record in logged_records(run_dir):
            step, value = record.get("step"), record.get(key)
            if value is None and key in record:  # logged null: a value that was not finite
                value = math.nan
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if isinstance(step, int) and step <= up_to:
                found = float(value)
    except OSError:
        return None
    return found


class FinalValue(NamedTuple):
    """One number a finished run reports: its JSON key, its words in the line, its format."""

    key: str
    label: str
    value: float | None
    fmt: str


def report_run(kind: str, result: Any, as_json: bool, finals: list[FinalValue]) -> None:
    """Report a runner's result (`trainer.runner.RunResult`: `SFTResult`, `GRPOResult`):
    where it wrote, the step it reached of the steps this run was set to train, the step it
    resumed from, its final values and its last checkpoint. The total is this run's
    (`result.total_steps`), not the one its last checkpoint records: a run with nothing left
    to train saves none, and a resume of a run stopped at step 4 of 40 with
    `trainer.total_steps=3` was said to be stopped "at step 4 of 40 by trainer.stop_at_step".
    Short of it, only `trainer.stop_at_step` ends a run (`trainer.config.end_step`)."""
    checkpoint = str(result.last_checkpoint) if result.last_checkpoint else None
    stopped_early = result.final_step < result.total_steps
    summary = {
        "run_dir": str(result.run_dir),
        "final_step": result.final_step,
        "total_steps": result.total_steps,
        "stopped_early": stopped_early,
        "resumed_from": result.resumed_from,
        **{final.key: final.value for final in finals},
        "checkpoint": checkpoint,
    }
    shown = "".join(
        f", {final.label} {final.value:{final.fmt}}" for final in finals if final.value is not None
    )
    if stopped_early:  # a job's time limit: the run is to go on, not to be exported yet
        line = (
            f"{kind}: stopped at step {result.final_step} of {result.total_steps} by"
            f" trainer.stop_at_step{shown}; checkpoint {checkpoint}; to go on from it, run the"
            " command again with trainer.stop_at_step raised or left out"
        )
    else:
        line = f"{kind}: step {result.final_step}{shown}; checkpoint {checkpoint}"
    if checkpoint is not None and not stopped_early:  # what a verl user asks about next
        line += f"; next: {_export_command(Path(result.run_dir), Path(checkpoint))}"
    report(summary, as_json, line)


def _export_command(run_dir: Path, checkpoint: Path) -> str:
    """The `mfsdp ckpt export-hf` of `run_dir` that works for its last `checkpoint`: a
    LoRA adapter whose base has no weights on disk (a random init) has no merged model,
    and the merged export refuses it, so such a run is told to export the adapter alone."""
    from mfsdp_ckpt.lora import adapter_without_base_weights

    flags = "--out DIR --adapter-only" if adapter_without_base_weights(checkpoint) else "--out DIR"
    return mfsdp_command("ckpt export-hf", run_dir, flags)
