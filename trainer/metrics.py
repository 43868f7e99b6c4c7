"""Training metrics: one JSON line per logged step in `<run_dir>/metrics.jsonl` (rank 0), the
trackers named in `trainer.logger` (verl's names: tensorboard under `<run_dir>/tensorboard/`,
wandb under `<run_dir>/wandb/`), and what the progress bar shows."""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from mfsdp_ckpt.check.printable import error_line
from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.format.layout import RUN_METRICS_FILE
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.file_errors import naming_file
from mfsdp_ckpt.storage.unique_json import parse_json
from trainer.closing import close_all
from trainer.run_files import refuse_foreign, refuse_link, replacing
from trainer.tracker_threads import ThreadFailure, started_watched

METRICS_FILE = RUN_METRICS_FILE  # layout.py names it: a path to a run dir is told by it
TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"  # wandb.init(dir=run_dir) writes here
# A record is a step's scalars, a few KB at most; a longer line is none of the logger's.
# Read whole, a file with no newline (a sparse or damaged one) was held in memory whole, and
# more, to resume: a line is read in pieces of at most this, and a longer one is no record.
MAX_RECORD_BYTES = 1 << 20

T = TypeVar("T")


class MetricsLogger:
    """Writes each logged step to metrics.jsonl and to every tracker the config names.

    Trackers start on the main rank only and fail at start, in one line, when their package is
    missing or they cannot start (`TrackerStartError`): a run must not train for hours and
    then lose its curves.
    """

    def __init__(
        self, run_dir: str | Path, enabled: bool, trainer: Any, merge_step: int | None = None
    ):
        """`merge_step`: a step whose record an earlier run may have logged and this run logs
        again first (a resume's validation at the step it resumes, GRPO's
        `val_before_train`): its records are merged into one (`_step_values`), which
        replaces them (`_replace_step`), and TensorBoard purges from that step, so the step
        shows once, where it showed twice."""
        self.enabled = enabled
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / METRICS_FILE
        self.events = self.run_dir / TENSORBOARD_DIR
        self._merge_step = merge_step
        self._tensorboard = None
        self._tensorboard_threads: ThreadFailure | None = None
        self._wandb = None
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        refuse_foreign(self.path, directory=False)  # appended to: never through a link
        trackers = require_trackers(trainer)
        if "tensorboard" in trackers:
            events = _tracker_dir(self.events)
            first = _first_step_to_log(self.run_dir)
            first = first if merge_step is None else min(first, merge_step)
            self._tensorboard, self._tensorboard_threads = started_watched(
                lambda: _started("tensorboard", lambda: _summary_writer(events, first))
            )
        if "wandb" in trackers:
            _tracker_dir(self.run_dir / WANDB_DIR)
            self._wandb = _started("wandb", lambda: _wandb_run(self.run_dir, trainer))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Append step `step`'s record to metrics.jsonl, strict JSON (a value that is not
        finite is `null`, as in `--json` and the rollout dumps: a bare `NaN` is refused by
        strict readers), and give its numbers to the trackers as they are, NaN and inf too
        (they plot them, as verl's do: a loss that diverged was missing from the curves)."""
        if not self.enabled:
            return
        earlier = None
        if step == self._merge_step:
            self._merge_step = None
            earlier = _step_values(self.run_dir, step)
        metrics = metrics if earlier is None else {**earlier, **metrics}
        record = {"step": step, "time": round(time.time(), 3), **metrics}
        line = (json.dumps(strict_record(record), allow_nan=False) + "\n").encode()
        if earlier is None:
            append_whole(self.path, line)
        else:
            _replace_step(self.run_dir, step, line)
        scalars = {
            key: value
            for key, value in metrics.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)
        }
        if self._tensorboard is not None:
            writer = self._tensorboard

            def add_scalars() -> None:
                for key, value in scalars.items():
                    writer.add_scalar(key, value, step)

            self._tensorboard_call(add_scalars)
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def close(self) -> None:
        """Close every tracker, each even when one before it failed; the first failure is
        raised (`closing.close_all`)."""
        closers: list[Callable[[], object]] = []
        writer = self._tensorboard
        if writer is not None:
            closers.append(lambda: self._tensorboard_call(writer.close))
        if self._wandb is not None:
            closers.append(self._wandb.finish)
        close_all(closers, None)

    def _tensorboard_call(self, call: Callable[[], object]) -> None:
        """`call` to TensorBoard's writer, whose failure to write is an OSError naming the
        tensorboard dir, the writer's own words no file (`error: No space left on device`).
        Its thread's failure (`tracker_threads`) is raised here too: the writer raises it
        at its next write, but its close may not."""
        try:
            call()
        except OSError as err:
            raise naming_file(err, self.events) from None
        failed = self._tensorboard_threads.failure if self._tensorboard_threads else None
        if isinstance(failed, OSError):
            raise naming_file(failed, self.events) from None
        if failed is not None:
            raise failed


def strict_record(record: dict[str, Any]) -> dict[str, Any]:
    """`record` (a step's flat scalars) with each float that is not finite as None: written
    `null`, which every JSON reader reads, where Python's json wrote `NaN`."""
    return {
        key: None if isinstance(value, float) and not math.isfinite(value) else value
        for key, value in record.items()
    }


def append_whole(path: Path, line: bytes) -> None:
    """Append `line` to `path` whole or not at all. A write cut short (a full disk, a file
    size limit) is cut back off the file: the torn record left behind became the start of
    the next record's line, unreadable for good. The OSError names the file (a write through
    a descriptor names none: the run's error line read `File too large` alone)."""
    fd = safe_files.open_regular_for_writing(path, append=True)
    try:
        start = os.fstat(fd).st_size
        left = memoryview(line)
        try:
            while left:
                left = left[os.write(fd, left) :]
        except OSError as err:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise naming_file(err, path) from None
    finally:
        os.close(fd)


def _step_values(run_dir: Path, step: int) -> dict[str, Any] | None:
    """The values every record an earlier run logged of `step` holds, merged in order (a
    later record's key wins), None where it logged none. An older mfsdp logged a resume's
    validation as a second record of its step: the merge kept the last record alone, the
    validation's, and the step's training values were lost."""
    merged: dict[str, Any] | None = None
    for record in logged_records(run_dir):
        if _record_step(record) == step:
            merged = {**(merged or {}), **record}
    if merged is None:
        return None
    return {key: value for key, value in merged.items() if key not in ("step", "time")}


def _replace_step(run_dir: Path, step: int, line: bytes) -> None:
    """Replace metrics.jsonl's records of `step` (the run resumes it: it holds none later)
    with `line`, the step's merged record, in one replace (`run_files.replacing`): the old
    file or the new one, never neither. Was: the file rewritten without the step, then the
    record appended; a failed append (a full disk) or a kill between lost the step's record."""
    path = Path(run_dir) / METRICS_FILE
    refuse_foreign(path, directory=False)
    steps, torn = _steps_in(path)
    what = f"merge its records of step {step} into one"
    _rewrite(path, step - 1, len(steps) - 1 if torn else -1, what, line)


class TrackerStartError(MfsdpFailedError):
    """A tracker `trainer.logger` names failed to start in the run (wandb.init refused its
    settings or could not reach its server, TensorBoard's writer could not open its dir):
    one line naming it and why (exit 1), not the library's traceback from inside a rank."""


def _started(name: str, start: Callable[[], T]) -> T:
    """What `start` returns; any failure of the tracker's own code is a TrackerStartError
    naming the tracker (Ctrl-C passes through)."""
    try:
        return start()
    except Exception as err:
        raise TrackerStartError(
            f"trainer.logger {name}: could not start ({error_line(err)}); fix that, or leave"
            f" {name} out of trainer.logger"
        ) from None


def _summary_writer(events: Path, purge_step: int) -> Any:
    """TensorBoard's writer into `events`, which hides the events an earlier run there wrote
    at `purge_step` or later (TensorBoard reads its mark as a restart): a resumed run logs
    again the steps it trains again, and TensorBoard showed each of them twice, the
    discarded one beside the new one, where metrics.jsonl keeps the new one alone."""
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(events), purge_step=purge_step)


def _first_step_to_log(run_dir: Path) -> int:
    """The first step a run starting now may log: one past the newest one metrics.jsonl
    records, which holds none past the step the run resumes (`drop_steps_after` removed
    them; the run logs every step again), or 0 where it records none (the run resumes no
    step: an earlier run's steps are all logged again)."""
    newest = last_logged_step(run_dir, 0)
    return 0 if newest is None else newest + 1


def _wandb_run(run_dir: Path, trainer: Any) -> Any:
    import wandb

    return wandb.init(
        project=trainer.project_name,
        name=trainer.experiment_name or run_dir.name,
        dir=str(run_dir),
        config=_resolved_config(run_dir),
    )


def _tracker_dir(path: Path) -> Path:
    """`path` as a directory a tracker writes into, made here: a file or FIFO in its place is
    one line naming it (the tracker's own makedirs said only "[Errno 17] File exists"), and
    so is a link to a directory: the tracker's files would go wherever it leads."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise MfsdpFailedError(
            f"{path}: exists and is not a directory; the run writes its tracker's files there: "
            "move it away or choose another trainer.run_dir"
        ) from None
    refuse_link(path)
    return path


def jsonl_note(logger: list[str]) -> str | None:
    """One note where `trainer.logger` leaves out `jsonl`: metrics.jsonl is written all the
    same, as resume (which records it drops and purges) and the run's summary read it; the
    value was accepted and did nothing, unsaid. None where it names jsonl."""
    if "jsonl" in logger:
        return None
    return (
        f"note: trainer.logger has no jsonl; {METRICS_FILE} is written all the same (resume"
        " and the run's summary read it)"
    )


TRACKER_PACKAGES = {"tensorboard": "pip install tensorboard", "wandb": "pip install 'mfsdp[wandb]'"}


def require_trackers(trainer: Any) -> set[str]:
    """The trackers `trainer.logger` (and `trainer.tensorboard`) name; a missing package is a
    one-line ConfigError, checked before the run starts (no torch needed)."""
    import importlib.util

    from trainer.config import ConfigError

    trackers = set(trainer.logger) | ({"tensorboard"} if trainer.tensorboard else set())
    for name, install in TRACKER_PACKAGES.items():
        if name in trackers and importlib.util.find_spec(name) is None:
            raise ConfigError(
                f"trainer.logger has {name} but the {name} package is missing: {install}"
            )
    return trackers


def _resolved_config(run_dir: Path) -> dict[str, Any] | None:
    """The config the run wrote into its run dir (trainer.config.write_resolved_config), so the
    tracker shows the hyper-parameters beside the curves. Read as config files are
    (`config_yaml`): a run that trains no step leaves the one there, which may be anyone's."""
    from trainer.config import RESOLVED_CONFIG_FILE
    from trainer.config_yaml import MAX_CONFIG_BYTES, YAMLConfigError, parse_yaml

    path = run_dir / RESOLVED_CONFIG_FILE
    try:
        recorded = parse_yaml(safe_files.read_text(path, MAX_CONFIG_BYTES, run_dir), str(path))
    except (OSError, YAMLConfigError):  # CheckpointFileError (a FIFO, too large) is an OSError
        return None
    return recorded if isinstance(recorded, dict) else None


def drop_steps_after(run_dir: str | Path, step: int) -> str | None:
    """Remove from metrics.jsonl the records of steps after `step`, the step a run starts
    from (-1 for a run that resumes nothing: every step's record goes), and a torn last
    line (a write a crash cut short: it has no newline and is no record), and say so in one
    line; None when there is none. A run that resumed an earlier step (`checkpoint.resume=
    PATH`, or a crash after steps logged past the last checkpoint) appended its steps to
    the other timeline's: steps 1-6, then 3-6 again; a torn last line became the start of
    the next record's line, both unreadable. Other lines that are no record with a step
    (an edit, a line longer than MAX_RECORD_BYTES) stay as they are, ended by a newline so
    that the next record starts its own line. The file is read in pieces of about
    MAX_RECORD_BYTES, so memory stays bounded whatever it holds. It is replaced whole
    (`run_files.replacing`): a crash or a full disk leaves the old one or the new one, and
    a failure names it (RunFileError). Called on rank 0 only."""
    path = Path(run_dir) / METRICS_FILE
    refuse_foreign(path, directory=False)  # read and replaced here, appended to next
    try:
        steps, torn = _steps_in(path)
    except OSError:  # none yet, or unreadable: MetricsLogger names that as it writes
        return None
    dropped = [n for n in steps if n is not None and n > step]
    if not dropped and not torn:
        return None
    what = (
        f"remove the records of steps after {step} from it"
        if dropped
        else "remove its torn last line"
    )
    _rewrite(path, step, len(steps) - 1 if torn else -1, what)
    return f"{path}: removed {_removed(dropped, torn, step)}"


def _rewrite(path: Path, step: int, torn_index: int, what: str, tail: bytes = b"") -> None:
    """Replace metrics.jsonl at `path` (`run_files.replacing`; `what` says in its error what
    could not be done) with its lines of steps up to `step` and those that are no record,
    each ended by a newline, less the torn last line at `torn_index` (-1: none), then
    `tail`."""
    with (
        os.fdopen(safe_files.open_regular(path), "rb") as source,
        replacing(path, what) as out,
    ):
        for index, (found, pieces) in enumerate(_lines(source, _step_of)):
            if found <= step if found is not None else index != torn_index:
                last = b""
                for last in pieces:
                    out.write(last)
                if not last.endswith(b"\n"):
                    out.write(b"\n")
        out.write(tail)


def _removed(dropped: list[int], torn: bool, step: int) -> str:
    """What `drop_steps_after` removed, in words."""
    said = ["a torn last line (a write cut short)"] if torn else []
    if dropped:
        first, last = min(dropped), max(dropped)  # "steps 3-3" said one step as a range
        named = f"step {first}" if first == last else f"steps {first}-{last}"
        steps = f"{len(dropped)} record(s) of {named}"
        if step < 0:
            said.insert(0, f"{steps} an earlier run logged")
            return f"{' and '.join(said)}; this run resumes no checkpoint"
        said.insert(0, f"{steps} an earlier run logged after step {step}")
        return f"{' and '.join(said)}, where this run resumes; it logs those steps again"
    return said[0]


def _steps_in(path: Path) -> tuple[list[int | None], bool]:
    """The step each line of metrics.jsonl at `path` records (None for a line that is no
    record), and whether the last line is torn: a record cut short, no record, with no
    newline after it and no longer than a record may be (a longer one is none of the
    logger's, kept). OSError when the file cannot be read."""
    with os.fdopen(safe_files.open_regular(path), "rb") as handle:
        steps = [found for found, _pieces in _lines(handle, _step_of)]
        if not steps or steps[-1] is not None:
            return steps, False
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - MAX_RECORD_BYTES - 1))
        tail = handle.read()
    return steps, not tail.endswith(b"\n") and (b"\n" in tail or size <= MAX_RECORD_BYTES)


def _lines(
    handle: BinaryIO, parse: Callable[[bytes], T | None]
) -> Iterator[tuple[T | None, Iterator[bytes]]]:
    """Each line of `handle`: what `parse` finds in it (the step it records, the record;
    None for a line longer than MAX_RECORD_BYTES, never parsed) and its bytes in pieces of
    at most MAX_RECORD_BYTES + 1, the last ending with its newline (none at the end of the
    file). Pieces the caller does not take are skipped, so only one piece is ever held."""
    while head := handle.readline(MAX_RECORD_BYTES + 1):
        if len(head) <= MAX_RECORD_BYTES:
            yield parse(head), iter((head,))
            continue
        pieces = _rest_of_line(handle, head)
        yield None, pieces
        for _skipped in pieces:
            pass


def _rest_of_line(handle: BinaryIO, head: bytes) -> Iterator[bytes]:
    """`head`, the start of a line, then the rest of that line in pieces."""
    piece = head
    yield piece
    while not piece.endswith(b"\n") and (piece := handle.readline(MAX_RECORD_BYTES + 1)):
        yield piece


def _step_of(line: bytes) -> int | None:
    """The step a metrics.jsonl line records, None for a line that is no such record."""
    record = _record_of(line)
    return _record_step(record) if record is not None else None


def _record_step(record: dict[str, Any]) -> int | None:
    """The step `record` records: an int (`true` or `3.0` is none), else None."""
    step = record.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


# A record is one object of a step's scalars; a line of more objects and arrays is none.
MAX_RECORD_CONTAINERS = 1024


def _record_of(line: bytes) -> dict[str, Any] | None:
    """The record a metrics.jsonl line holds, None for a line that is no record (a torn
    write, an edit, not a JSON object). Parsed by the bounded JSON reader (`parse_json`: at
    most MAX_RECORD_CONTAINERS objects and arrays, counted before it is parsed, nested no
    deeper than MAX_JSON_DEPTH, each key once), never by Python's json alone."""
    try:
        record = parse_json(line, METRICS_FILE, ValueError, MAX_RECORD_CONTAINERS)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def logged_records(run_dir: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Each record in `run_dir`'s metrics.jsonl, in order (none when there is no file), read
    as `drop_steps_after` reads it: a regular file (never a FIFO, which blocked a reader for
    ever), a line at a time, none held past MAX_RECORD_BYTES, each parsed bounded
    (`_record_of`); a line that is no record (a torn write, an edit, a longer line) is
    skipped, as the step counting skips it."""
    path = Path(run_dir) / METRICS_FILE
    if not os.path.lexists(path):
        return
    with os.fdopen(safe_files.open_regular(path), "rb") as handle:
        for record, _pieces in _lines(handle, _record_of):
            if record is not None:
                yield record


def metrics_size(run_dir: str | os.PathLike) -> int:
    """How many bytes metrics.jsonl holds now (0 when there is none): the launching process
    notes it before its ranks start, so that `last_logged_step` reads only the lines they add
    (a resumed run appends to the lines of the runs before it)."""
    try:
        return os.stat(Path(run_dir) / METRICS_FILE).st_size
    except OSError:
        return 0


TAIL_BYTES = 1 << 16  # a step's line is a few hundred bytes


def last_logged_step(run_dir: str | os.PathLike, since: int) -> int | None:
    """The newest step a complete line added to metrics.jsonl after byte `since` records,
    None when none was added. The launching process never sees its ranks' steps; rank 0
    logs each (every `trainer.log_every`) here. Only the file's last TAIL_BYTES are read, so
    asking costs the same after any number of steps. A resume that removed an earlier run's
    later records (`drop_steps_after`) left the file shorter: what lies past `since` is
    still this run's, and a file cut below `since` holds only the steps up to the one this
    run resumed from, and this run's: its newest line is read from the start."""
    try:  # a FIFO there blocked this (as the run ended) for ever: regular files only
        with os.fdopen(safe_files.open_regular(Path(run_dir) / METRICS_FILE), "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            since = since if since <= size else 0
            start = max(since, size - TAIL_BYTES)
            handle.seek(start)
            lines = handle.read(size - start).split(b"\n")[:-1]  # the last one is unfinished
    except OSError:
        return None
    for line in reversed(lines[1:] if start > since else lines):  # the first may be cut
        step = _step_of(line)
        if step is not None:
            return step
    return None


def bar_postfix(metrics: dict[str, Any]) -> dict[str, str]:
    """SFT's few figures for the progress bar (or the step's line when no bar is drawn),
    short enough for one terminal line; GRPO shows its own (`GRPOSteps.bar_postfix`). The
    train/ and perf/tokens_per_s keys are in every step's record; val/loss is there only on
    a step that ran validation and perf/mfu is None without a known peak, so both are
    shown only when they have a value. A batch whose rows train no token (each named in a
    note as the data was read) has no loss: its step still runs, as verl's does (weight
    decay, the optimizer's moments), and its line says why it shows none ("loss=0.0000"
    read as a perfect fit)."""
    no_targets = metrics.get("train/loss_tokens") == 0
    shown = {
        "loss": "- (no target tokens)" if no_targets else f"{metrics['train/loss']:.4f}",
        "lr": f"{metrics['train/lr']:.2e}",
        "gnorm": f"{metrics['train/grad_norm']:.3f}",
        "tok/s": f"{metrics['perf/tokens_per_s']:.0f}",
    }
    if metrics.get("val/loss") is not None:
        shown["val"] = f"{metrics['val/loss']:.4f}"
    if metrics.get("perf/mfu") is not None:
        shown["mfu"] = f"{100 * metrics['perf/mfu']:.1f}%"
    return shown
