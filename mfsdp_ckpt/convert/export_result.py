"""What an export answers: the files written, the time each phase took, its notes.

Every export kind (full, LoRA merged, PEFT adapter, Megatron adapter) returns this one
record, so the CLI prints and `--json` reports them alike.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from mfsdp_ckpt.check.trainer_step import checkpoint_step
from mfsdp_ckpt.convert.conversion_result import ConversionResult
from mfsdp_ckpt.convert.mtp import MtpLayers
from mfsdp_ckpt.convert.units import gb_per_s, took
from mfsdp_ckpt.format.folder_step import ShownStep
from mfsdp_ckpt.format.layout import CheckpointPaths
from mfsdp_ckpt.storage.reader import CheckpointReader


@dataclass
class ExportResult(ConversionResult):
    files: list[str]
    seconds: float
    mismatches: list[str] | None = None  # None: not verified
    notes: list[str] = field(default_factory=list)
    dropped_mtp: dict[str, int] | None = None  # {"layers", "tensors"} left out by --drop-mtp
    # `seconds` runs from the command's start once Python and mfsdp are loaded (reading the
    # checkpoint's metadata included; --verify first imports transformers to build
    # config.json, seconds alone): the rates are the tensors' own. None: not timed apart
    # from `seconds` (convert), not verified.
    convert_seconds: float | None = None  # reading, converting and writing the tensors
    verify_seconds: float | None = None  # --verify: reading them back, comparing, hashing
    # what was read, as inspect and validate name it: the DCP directory (a URL's location)
    # and its step, which a run dir's tracker or newest step dir chose (None: none known),
    # with `step_from` "folder_name" where only its folder's name gives it (inspect's)
    checkpoint: str | None = None
    step: int | None = None
    step_from: str | None = None

    def published(self, out: os.PathLike | str, started: float) -> ExportResult:
        """This result with the --out it now stands at and the whole command's seconds since
        `started`, set once the output is published (the LoRA exports build it before)."""
        self.out_dir, self.seconds = str(out), time.monotonic() - started
        return self

    def read_from(
        self,
        location: str,
        paths: CheckpointPaths | None,
        reader: CheckpointReader | None = None,
    ) -> ExportResult:
        """This result naming the checkpoint it was read from (`location`, the DCP directory
        of a local checkpoint's `paths`, which `reader` reads: opened here where the caller
        holds none) and its step as inspect gives it (`trainer_step.checkpoint_step`, the
        folder's number of a torchtitan `step-N` included): a pipeline that exports a run
        dir registers the step it got without a second look, which a newer save could
        race."""
        shown = ShownStep(None)
        if paths is not None:
            shown = checkpoint_step(paths, reader or CheckpointReader(paths.dist_ckpt))
        self.checkpoint, self.step, self.step_from = location, shown.step, shown.source
        return self

    def left_out(self, mtp: MtpLayers | None) -> None:
        """Record the multi-token prediction layers the export left out, and note them."""
        if mtp is not None:
            self.dropped_mtp = mtp.counts()
            self.notes.append(mtp.dropped_note())

    @property
    def gb_per_s(self) -> float:
        """The bytes over the whole command's `seconds` (`convert_gb_per_s`: the export's)."""
        return gb_per_s(self.bytes, self.seconds) or 0.0

    @property
    def verify_gb_per_s(self) -> float | None:
        return gb_per_s(self.bytes, self.verify_seconds)

    def summary(self) -> str:
        verified = ""
        if self.mismatches == []:
            timed = (
                "" if self.verify_seconds is None else f" {took(self.bytes, self.verify_seconds)}"
            )
            verified = f" verified{timed},"
        return (
            f"exported {self.converted()},{verified} {self.seconds:.1f} s in all,"
            f" {len(self.files)} file(s), {self.dtype}, layout {self.layout},"
            f" {self.model_type} -> {self.out_dir}"
        )
