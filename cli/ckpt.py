"""`mfsdp ckpt ...`: inspect, validate and export checkpoints (no GPU, no process group)."""

from __future__ import annotations

import json
import sys

import click

from cli.errors import EXIT_FAILED, friendly_errors
from mfsdp_ckpt.errors import CheckpointFormatError, UnsafeMetadataError
from mfsdp_ckpt.layout import CheckpointPathError
from mfsdp_ckpt.manifest import ManifestError
from mfsdp_ckpt.storage import CheckpointFileError

BAD_CHECKPOINT = (CheckpointFormatError, CheckpointFileError, UnsafeMetadataError, ManifestError)


@click.group()
def ckpt() -> None:
    """Inspect, validate and export checkpoints, on any machine (CPU only is fine)."""


@ckpt.command()
@click.argument("path", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@friendly_errors(usage=(CheckpointPathError,), failure=BAD_CHECKPOINT)
def inspect(path: str, as_json: bool) -> None:
    """Show a checkpoint's step, contents, tensors and totals.

    PATH is a run dir (the tracker's step), a step dir, or a bare dist_ckpt dir.

    \b
    Example:
      mfsdp ckpt inspect runs/demo
      mfsdp ckpt inspect runs/demo/global_step_4/dist_ckpt --json | jq .tensors[0]
    """
    from mfsdp_ckpt.inspect import describe_checkpoint, format_description

    description = describe_checkpoint(path)
    click.echo(json.dumps(description, indent=2) if as_json else format_description(description))


@ckpt.command()
@click.argument("path", type=click.Path())
@click.option("--deep", is_flag=True, help="Also check sha256 of every file and read every tensor (NaN/Inf).")
@click.option("--strict", is_flag=True, help="Treat warnings (unknown files, stale tracker) as failures.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (for scripts and CI).")
@friendly_errors(usage=(CheckpointPathError,))
def validate(path: str, deep: bool, strict: bool, as_json: bool) -> None:
    """Check that a checkpoint is complete and intact. Exit 0 valid, 1 invalid, 2 bad usage.

    PATH is a run dir (follows latest_checkpointed_iteration.txt), a step dir, or a bare
    dist_ckpt dir as Megatron-LM, Megatron-Bridge or verl write it (no manifest).

    \b
    Checks: metadata readable (safely: nothing in it can run code); every referenced
    file present with the right size; chunks tile every tensor exactly; optimizer state
    shaped like its parameters; weights agree with huggingface/config.json; tracker
    points at a complete step. --deep adds sha256 against the manifest and reads every
    tensor, counting NaN/Inf.

    \b
    Example:
      mfsdp ckpt validate runs/sft --deep
    """
    from mfsdp_ckpt.validate import validate_checkpoint

    with _progress_bar(enabled=deep and not as_json, unit="tensor") as progress:
        report = validate_checkpoint(path, deep=deep, progress=progress)
    if as_json:
        click.echo(json.dumps(report.to_dict(strict), indent=2))
    else:
        for finding in report.findings:
            click.echo(str(finding))
        verdict = "valid" if report.ok(strict) else "INVALID"
        click.echo(
            f"{verdict}: {report.checkpoint} (step {report.step if report.step is not None else '-'}, "
            f"{report.tensors} tensors, {report.tensor_bytes / 2**20:.1f} MiB, {report.files} files"
            f"{', deep' if deep else ''})"
        )
    if not report.ok(strict):
        sys.exit(EXIT_FAILED)


class _progress_bar:
    """A tqdm bar on stderr that takes (done, total) callbacks; a no-op when disabled."""

    def __init__(self, enabled: bool, unit: str):
        self.enabled, self.unit, self.bar = enabled and sys.stderr.isatty(), unit, None

    def __enter__(self):
        return self.update if self.enabled else None

    def update(self, done: int, total: int) -> None:
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(total=total, unit=self.unit, file=sys.stderr, leave=False)
        self.bar.update(done - self.bar.n)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()


from cli.export_hf import export_hf  # noqa: E402  (command defined in its own module)

ckpt.add_command(export_hf)
from cli.import_hf import import_hf  # noqa: E402
ckpt.add_command(import_hf)
