"""What `mfsdp ckpt validate` reports: findings (severity, where, what) and the verdict.

Kept apart from the checks so that every check module (storage, optimizer, config) adds
to one report type, and the CLI, resume and export read the verdict the same way.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mfsdp_ckpt.check.printable import cut_to, printable
from mfsdp_ckpt.format.optimizer_states import HeldStates
from mfsdp_ckpt.format.run_steps import newest_of
from mfsdp_ckpt.format.unread_manifest import unread_manifest

ERROR, WARNING = "error", "warning"
NOTE = "note"  # what was read otherwise and why it is fine: fails nothing, --strict neither
# The verdicts (`ValidationReport.verdict`): `unsupported` is a checkpoint with no damage
# found whose model or adapter is a kind export-hf does not convert (a LayerNorm model,
# DoRA: `RefusedKind`, the only refusals `add_unsupported` is given): it fails (exit 1) as
# what validate passes, export writes, but is no reason to delete it, which "invalid" read
# as. Any other error, a record value that is no valid value included, is `invalid`.
VALID, UNSUPPORTED, INVALID = "valid", "unsupported", "invalid"
STRICT_NEEDS_MANIFEST = "no manifest.json: --strict requires one (file hashes cannot be checked)"
SHAPES_UNCHECKED = "no Hugging Face config: weight shapes not checked"
NO_HF_CONFIG = f"{SHAPES_UNCHECKED} (pass --hf-config DIR)"

Progress = Callable[[int, int], None]  # (done, total) over tensors / bytes


@dataclass(frozen=True)
class Finding:
    severity: str
    where: str
    message: str

    def __str__(self) -> str:
        """One terminal line, whatever names from the checkpoint it quotes."""
        return printable(f"{self.severity}: {self.where}: {self.message}")


def without_location(err: Exception, location: str | Path) -> str:
    """`err`'s message less the location it starts with (`{location}: ...`, or
    `{location} [key]: ...` keeping the stored key), for a line that names the location
    itself. The exact prefix, not the text up to the first ": ": a path holding ": " (a
    dir "bad: cfg") was cut inside itself, and the line named its tail a second time. A
    message that starts with some other place (a directory on the way that could not be
    opened) is still cut at its first ": "."""
    text, prefix = str(err), str(location)
    rest = text.removeprefix(prefix)
    if prefix and rest != text and rest[:1] in (":", " "):
        return rest.removeprefix(":").strip()
    return text.split(": ", 1)[-1]


def error_location(err: Exception, base: str | os.PathLike) -> str:
    """Where the one line `err` says it happened: the path it starts with, which lies in
    `base` (the checkpoint or model dir checked): `base` as the line spells it, then the
    rest up to the next ": " (a stored key, ` [args]`, kept). Cut at the line's first ": ",
    a `base` holding ": " (a dir "run: 2", legal on Linux) was named cut short, and the
    message began with the rest of its path. A line that does not start with `base` is
    cut at its first ": "; one with no ": " is its own location."""
    text, prefix = str(err), str(base)
    start = len(prefix) if prefix and text.startswith(prefix) else 0
    end = text.find(": ", start)
    return text if end < 0 else text[:end]


@dataclass
class ValidationReport:
    path: str
    checkpoint: str | None = None
    step: int | None = None
    step_from: str | None = None  # "folder_name" where the files record no step (folder_step)
    findings: list[Finding] = field(default_factory=list)
    tensors: int = 0
    tensor_bytes: int = 0
    files: int = 0
    deep: bool = False
    layout: str | None = None
    role: str | None = None
    has_manifest: bool = True
    has_optimizer_state: bool | None = None  # Adam moments etc. under optimizer.state.
    optimizer_kind: HeldStates | None = None  # which optimizer's states those are
    hash_algorithms: list[str] = field(default_factory=list)  # digests `deep` checked
    note: str | None = None  # how the path was read (a parent dir holding one run), for stderr
    adapter: str | None = None  # a Megatron PEFT adapter among the weights, in one line

    def __post_init__(self) -> None:
        self._seen = set(self.findings)
        self._errors = {f"{f.where}: {f.message}" for f in self.findings if f.severity == ERROR}
        self._run_record: tuple[str, str] | None = None  # (run dir, its tracker)
        self._unsupported: list[Finding] = []  # errors that are export's refusals alone
        self._read = True  # False: the path given was no checkpoint to read (`not_read`)
        # (the tracker that failed, the complete steps beside it): `tracker_failed`
        self._tracker_failed: tuple[str, list[str]] | None = None

    def read_from_run(self, run_dir: str | Path, tracker: str | Path) -> None:
        """The step checked was chosen in run dir `run_dir` by `tracker`: findings there are
        the run dir's, which the verdict blames on it, not on the step (`failed_run`)."""
        self._run_record = (str(run_dir), str(tracker))

    def failed_run(self, strict: bool = False) -> tuple[str, str] | None:
        """(run dir, tracker) when the verdict fails on the tracker alone and the step read
        in its place passes: "INVALID" next to that step sent users to delete a sound one."""
        if self._run_record is None or self.ok(strict):
            return None
        tracker = self._run_record[1]
        step_findings = [f for f in self.findings if f.where != tracker]
        return self._run_record if self._passes(step_findings, strict) else None

    def not_read(self, where: str | Path, err: Exception) -> None:
        """The path given is damage no check could read past (`err`, said under `where`): a
        save that did not finish, a run dir whose saves never did. It is what `checkpoint`
        names, the verdict is INVALID (exit 1) and nothing else was checked. Raised instead,
        it was no report: `--json` printed the failure object where a script reads
        `valid`, and the text said no verdict, for verl's, Megatron's and the Hugging Face
        Trainer's unfinished saves alone (a step of mfsdp's has its manifest to read)."""
        self._run_record = None  # the path given is at fault, not a tracker beside a step
        self.checkpoint, self.has_manifest = self.path, False
        self.add_error(where, err)
        self._read = False

    def tracker_failed(self, tracker: str | Path, err: Exception, complete: list[Path]) -> None:
        """The run dir given was not read because its tracker (`tracker`, `err` saying
        what is wrong) failed, beside step dirs `complete` (oldest first) that each read
        alone: INVALID as `not_read`, and the verdict (`--json`'s `note` too) names those
        steps, so the user gives one. Said as "not read as a checkpoint", a sound step
        beside a bad tracker went unmentioned."""
        self.not_read(tracker, err)
        self._tracker_failed = (str(tracker), [str(step) for step in complete])

    @property
    def failed_tracker(self) -> str | None:
        """The tracker `tracker_failed` was given; None where none failed so."""
        return None if self._tracker_failed is None else self._tracker_failed[0]

    @property
    def offered(self) -> str | None:
        """Where a tracker failed (`tracker_failed`): the complete steps to give instead, in
        words ("complete step dir here: RUN/iter_0000010: give it to validate that step",
        or that none is complete); None otherwise."""
        if self._tracker_failed is None:
            return None
        complete = self._tracker_failed[1]
        if not complete:
            return "no complete step dir here"
        if len(complete) == 1:
            return f"complete step dir here: {complete[0]}: give it to validate that step"
        return f"complete step dirs here: {newest_of(complete)}: give one to validate that step"

    @property
    def read(self) -> bool:
        """Whether a checkpoint was read at all (False after `not_read`)."""
        return self._read

    def add(self, severity: str, where: str | Path, message: str) -> None:
        """One finding; the same one again is left out (two checks that open one file, the
        digests and the assets, both meet it unreadable: one line says it), and so is one
        that ends quoting an error already reported (a check that could not run, the tied
        head's comparison, for the file an earlier line says is linked out: one fault)."""
        finding = Finding(severity, str(where), message)
        if finding in self._seen or self._quotes_an_error(message):
            return
        self._seen.add(finding)
        self.findings.append(finding)
        if severity == ERROR:
            self._errors.add(f"{finding.where}: {message}")

    def add_unsupported(self, where: str | Path, message: str) -> None:
        """An error that is export-hf's refusal of a kind of model or adapter it does not
        convert (`RefusedKind`), never damage: it fails the checkpoint as any error does,
        and the verdict says `unsupported` when no other finding fails it (`verdict`)."""
        before = len(self.findings)
        self.add(ERROR, where, message)
        if len(self.findings) > before:
            self._unsupported.append(self.findings[-1])

    def add_error(
        self, where: str | Path, err: Exception, *, named: str | Path | None = None
    ) -> None:
        """The error a check caught, as a finding under `where`: its message without the
        location it starts with (`named`, else `where`), which the line already names."""
        self.add(ERROR, where, without_location(err, where if named is None else named))

    def _quotes_an_error(self, message: str) -> bool:
        """Whether `message` ends with an error line already reported (`where: message`, as
        the exception a check caught says it), after any of its `: `."""
        start = message.find(": ")
        while start >= 0:
            if message[start + 2 :] in self._errors:
                return True
            start = message.find(": ", start + 2)
        return False

    @property
    def manifest_unread(self) -> str | None:
        """Why the manifest.json of the step checked went unread (damaged, or written by a
        newer mfsdp: `unread_manifest`), which every line saying its hashes were not checked
        gives; None where it was read or none is there."""
        if self.checkpoint is None:
            return None
        unread = unread_manifest(Path(self.checkpoint), self.layout)
        return None if unread is None else unread[1]

    def ok(self, strict: bool = False) -> bool:
        """No errors; with `strict`, no warnings either, and a manifest whose hashes
        could be checked."""
        return self._passes(self.findings, strict)

    def verdict(self, strict: bool = False) -> str:
        """VALID when `ok`; UNSUPPORTED when every finding that fails it is export's refusal
        (`add_unsupported`); else INVALID: damage wins, and so does what `strict` fails."""
        if self.ok(strict):
            return VALID
        rest = [f for f in self.findings if f not in self._unsupported]
        return UNSUPPORTED if self._passes(rest, strict) else INVALID

    @property
    def unsupported_reason(self) -> str | None:
        """Why export-hf cannot convert the checkpoint: the first refusal's message (the
        verdict's words where it is UNSUPPORTED); None where export refuses nothing."""
        return self._unsupported[0].message if self._unsupported else None

    def _passes(self, findings: list[Finding], strict: bool) -> bool:
        bad = {ERROR, WARNING} if strict else {ERROR}
        if strict and not self.has_manifest:
            return False
        return not any(f.severity in bad for f in findings)

    def to_dict(self, strict: bool = False) -> dict:
        """The JSON object; `checkpoint` names what the verdict is about: the run dir where
        its tracker alone failed, with the step read in its place in `note`."""
        data = asdict(self)
        for finding in data["findings"]:  # cut as each stderr line is (`cut_to`), not escaped
            for key in ("where", "message"):
                finding[key] = cut_to(finding[key])
        data["valid"] = self.ok(strict)
        data["verdict"] = self.verdict(strict)
        if self._tracker_failed is not None:
            offered = f"{self.failed_tracker} failed; {self.offered}"
            data["note"] = "; ".join(filter(None, (self.note, offered)))
        failed = self.failed_run(strict)
        if failed is not None:
            data["checkpoint"] = failed[0]
            instead = f"{self.checkpoint}, read since {failed[1]} failed, passed its checks"
            data["note"] = "; ".join(filter(None, (self.note, instead)))
        if strict and not self.has_manifest and self._read:  # the text verdict says it
            data["findings"].append(
                asdict(Finding(ERROR, self.checkpoint or self.path, STRICT_NEEDS_MANIFEST))
            )
        return data
