"""`mfsdp ckpt ...`: inspect, validate and export checkpoints (no GPU, no process group)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cli.choice import Choice
from cli.errors import EXIT_FAILED, EXIT_USAGE, READ_PATH, GivenPath, fail, json_option
from cli.given_once import OnceGroup
from cli.json_text import json_text
from cli.lines import say
from cli.metadata_progress import metadata_progress
from trainer.progress import CallbackBar

if TYPE_CHECKING:
    from mfsdp_ckpt.check.report import ValidationReport

PATH_HELP = """PATH is any level of a checkpoint: a run dir (follows
latest_checkpointed_iteration.txt), a step dir, a dist_ckpt dir, or a directory holding
one run. Layouts: mfsdp's own; verl RL (global_step_N/actor[/model]/dist_ckpt) and SFT
(global_step_N/dist_ckpt); Megatron-LM (iter_0000100/ with .metadata); Megatron-Bridge
(iter_0000100/ with run_config.yaml, latest_train_state.pt); Hugging Face's Trainer with FSDP
(OUTPUT/checkpoint-N/pytorch_model_fsdp_0 and optimizer_0). See docs/interop.md."""

ROLE_OPTION = click.option(
    "--role",
    type=Choice(["actor", "critic"]),
    default=None,
    help="verl RL step with actor/ and critic/: which one (default actor).",
)


@click.group(cls=OnceGroup, short_help="Inspect, validate, export and import checkpoints.")
def ckpt() -> None:
    """Inspect, validate, export and import checkpoints, on any machine (CPU only is fine).

    Reads mfsdp's checkpoints and those verl, Megatron-LM and Megatron-Bridge write with
    Megatron-FSDP (`--ckpt-format fsdp_dtensor`: a torch.distributed.checkpoint directory of
    .metadata and *.distcp files), at any directory level. Weights are named in one of two
    layouts: hf (transformers' names, as mfsdp and FSDP2 save them) or mcore (Megatron-core
    GPTModel's). Layouts, which path to give, and roles (verl's actor/critic):
    docs/interop.md.

    \b
    Examples:
      mfsdp ckpt inspect runs/demo
      mfsdp ckpt validate runs/demo --deep
      mfsdp ckpt validate ckpts/verl_run/global_step_40 --role critic
      mfsdp ckpt export-hf runs/demo --out hf/demo
      mfsdp ckpt export-hf megatron_run --hf-config Qwen2.5-7B/ --out hf/q7
      mfsdp ckpt import-hf hf/demo --out ckpts/from_hf --layout mcore
    """


def _say_note(paths_note: str | None) -> None:
    """How a path was read (e.g. runs/demo holds one run: runs/demo/sft), on stderr."""
    if paths_note:
        say(f"note: {paths_note}", err=True)


@ckpt.command(
    short_help="Show a checkpoint's layout, step and tensors.",
    help=f"""Show a checkpoint's step, layout, which entries hold the model's weights and the
optimizer's state, tensors (and which one names another's bytes:
a tied output layer stored once), non-tensor entries and totals; for a LoRA checkpoint
also its rank, alpha, target modules and base model, and whether that base is still on disk
as recorded.

{PATH_HELP}

\b
Examples:
  mfsdp ckpt inspect runs/demo
  mfsdp ckpt inspect runs/demo/sft/global_step_80/dist_ckpt --json | jq .tensors[0]
  mfsdp ckpt inspect runs/sft_lora --deep --json | jq .lora   # docs/lora.md
""",
)
@click.argument("path", type=READ_PATH)
@ROLE_OPTION
@json_option(
    "Print the description as one JSON object on stdout (a failure as {error, exit_code})."
)
@click.option(
    "--deep",
    is_flag=True,
    help="LoRA checkpoints: also hash the base model's weight files (reads all of them)."
    " No tensor of the checkpoint itself is read: validate --deep reads them.",
)
def inspect(path: str, role: str | None, as_json: bool, deep: bool) -> None:
    from mfsdp_ckpt.check.describe import describe_checkpoint, format_description
    from mfsdp_ckpt.format.path_refusals import refuse_url
    from trainer.threads import configure_threads_when_torch_loads

    refuse_url(path)  # every spelling of a file: URL is told its local path, as validate does
    # reading pickled objects loads torch: train's choice, for one process, made only then
    configure_threads_when_torch_loads()
    # --deep on LoRA hashes the whole base model: minutes for a 7B one. Progress goes to
    # stderr under --json too: stdout holds the one JSON object
    bar = CallbackBar(enabled=deep, unit="B", desc="inspect", unit_scale=True)
    with metadata_progress(), bar as progress:
        description = describe_checkpoint(path, role=role, deep=deep, progress=progress)
    _say_note(description["note"])
    if deep and description["lora"] is None:
        _say_note(
            "--deep hashes a LoRA checkpoint's base model; this checkpoint is not LoRA, so"
            " nothing more was read (mfsdp ckpt validate --deep reads every file and tensor)"
        )
    click.echo(json_text(description, indent=2) if as_json else format_description(description))


@ckpt.command(
    short_help="Check that a checkpoint is complete and intact.",
    help=f"""Check that a checkpoint is complete and intact. Exit 0 valid, 1 invalid, 2 bad usage.
The verdict line starts valid, INVALID (damage, or a check that failed), or UNSUPPORTED
(intact, but a kind of model or adapter export-hf does not convert, such as LayerNorm or
DoRA, said why; exit 1).

{PATH_HELP}

Checks: metadata readable (safely: nothing in it can run code); every referenced
file present with the right size; chunks tile every tensor exactly; optimizer state
shaped like its parameters (FSDP2's, torch's DCP recipe's `app.optim.state.` and
Megatron's distributed-optimizer names);
weights agree with huggingface/config.json (or --hf-config); tracker points at a
complete step. --deep checks every file's digest against the manifest (xxh3_128;
sha256 in older manifests), reads every tensor (NaN/Inf) and checks every non-tensor
blob. verl and Megatron-LM write no manifest: the verdict then says hashes were not
checked, and --strict fails; --deep then also reads the optimizer's second moments
(never negative) and step counts (whole, from 0).

\b
Examples:
  mfsdp ckpt validate runs/demo --deep
  mfsdp ckpt validate megatron_run/iter_0000100 --hf-config Qwen2.5-7B/ --json
""",
)
@click.argument("path", type=READ_PATH)
@ROLE_OPTION
@click.option(
    "--deep",
    is_flag=True,
    help="Also check every file's digest (xxh3_128 or sha256) and read every tensor (NaN/Inf;"
    " without a manifest also a negative exp_avg_sq, a step count below 0 or not whole), "
    "and build config.json with transformers' config class (one it refuses is an error); "
    "on a LoRA checkpoint also hash its base model (a bar of its own on a terminal).",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Treat warnings (such as files the manifest does not list) and a missing manifest as"
    " failures.",
)
@click.option(
    "--hf-config",
    type=GivenPath(exists=False),
    default=None,
    help="HF model dir or config.json to check weight shapes against (wins over huggingface/).",
)
@json_option("Print the report as one JSON object on stdout (a failure as {error, exit_code}).")
def validate(
    path: str, role: str | None, deep: bool, strict: bool, hf_config: str | None, as_json: bool
) -> None:
    from mfsdp_ckpt.check.validate import validate_checkpoint
    from mfsdp_ckpt.format.hub_id import missing_hf_config
    from trainer.threads import configure_threads

    if hf_config is not None and not os.path.lexists(hf_config):
        fail(missing_hf_config(hf_config), EXIT_USAGE)
    if hf_config is not None:
        _check_hf_config_readable(hf_config)
    # --deep scans every tensor for NaN/Inf with torch, piece by piece: torch's default of a
    # spinning thread per core took several times as long on a busy machine as train's
    # choice; the plain check loads no torch, and the choice's CPU sample would slow it
    if deep:
        configure_threads(1)
    # Three bars, one after the other: a LoRA checkpoint's base model is hashed first (bytes:
    # gigabytes against an adapter of megabytes), then the checkpoint's own files, then its
    # tensors are read, counted in bytes (one tensor may be gigabytes). Under --json too, on
    # stderr: a script's CI log shows minutes of work moving.
    base_bar = CallbackBar(enabled=deep, unit="B", desc="validate base model", unit_scale=True)
    hash_bar = CallbackBar(enabled=deep, unit="B", desc="validate hashes", unit_scale=True)
    with (
        metadata_progress(),
        base_bar as base_progress,
        hash_bar as hash_progress,
        CallbackBar(deep, "B", "validate", unit_scale=True) as progress,
    ):
        report = validate_checkpoint(
            path,
            deep=deep,
            progress=progress,
            role=role,
            hf_config=hf_config,
            base_progress=base_progress,
            hash_progress=hash_progress,
        )
    if as_json:  # its note names the step read where a failed tracker is blamed
        found = report.to_dict(strict)
        _say_note(found["note"])
        click.echo(json_text(found, indent=2))
    else:
        _say_note(report.note)
        for finding in report.findings:
            say(str(finding))
        say(_verdict(report, strict, deep))
    if not report.ok(strict):
        sys.exit(EXIT_FAILED)


def _check_hf_config_readable(hf_config: str) -> None:
    """An --hf-config without a config.json, or one that is no JSON config (a FIFO, bad
    JSON, no model_type), is bad usage (exit 2), as export-hf says: reported as a finding,
    it made a sound checkpoint INVALID. A dir without one is said to be what it is (a
    checkpoint's step: its huggingface/ holds the config.json), as export-hf says it."""
    from mfsdp_ckpt.convert.hf_config import HFConfigError, read_config_json, refuse_quantized
    from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE
    from mfsdp_ckpt.storage import safe_files
    from mfsdp_ckpt.storage.byte_store import CheckpointFileError

    given = Path(hf_config)
    config_file = given / HF_CONFIG_FILE if given.is_dir() else given
    if given.is_dir() and not os.path.lexists(config_file):  # a checkpoint's step, a run dir
        from mfsdp_ckpt.convert.export_source import no_config_json

        fail(str(no_config_json(hf_config, hf_config)), EXIT_USAGE)
    root = safe_files.model_dir_root(config_file.parent)
    try:
        if os.path.lexists(config_file):  # inside its model dir, as export reads it
            safe_files.regular_file(config_file, root, f"the model dir {config_file.parent}")
        refuse_quantized(read_config_json(config_file, root)[1], config_file)
    except (HFConfigError, CheckpointFileError) as err:
        fail(f"--hf-config {err}", EXIT_USAGE)


def _verdict(report: ValidationReport, strict: bool, deep: bool) -> str:
    """The one-line verdict; without a manifest, or with one that cannot be read, it says
    what that leaves unchecked and why. Where a run dir's tracker alone failed, it names the
    run dir, and the step read in its place as valid: "INVALID: RUN/global_step_N/dist_ckpt"
    sent users to delete a sound step. A checkpoint whose only errors are export-hf's
    refusals of a kind of model or adapter (a LayerNorm model, DoRA) is UNSUPPORTED, with
    the first refusal: INVALID there read as damage, and sent users to delete days of
    compute. Damage (any other error) is never UNSUPPORTED (`ValidationReport.verdict`).
    A path that is damage no check read past (a save that did not finish) has nothing more
    to say: "layout unread, 0 tensors, 0 files" read as a checkpoint read and found empty;
    a run dir whose tracker failed names the complete steps beside it to give instead."""
    from mfsdp_ckpt.check.printable import MAX_ERROR_CHARS, cut_to
    from mfsdp_ckpt.check.report import UNSUPPORTED

    if report.failed_tracker is not None:  # the steps to give instead
        tracker = Path(report.failed_tracker).name
        return f"INVALID: {report.checkpoint} ({tracker} failed, see above; {report.offered})"
    if not report.read:  # damage met finding the checkpoint: its error line says which
        return f"INVALID: {report.checkpoint} (not read as a checkpoint: see the error above)"
    details = _details(report, strict, deep)
    failed = report.failed_run(strict)
    if failed is not None:
        run, tracker = failed
        return (
            f"INVALID: {run} ({Path(tracker).name} failed, see above); {report.checkpoint},"
            f" read in its place, is valid {details}"
        )
    if report.verdict(strict) == UNSUPPORTED:  # exit 1 still: export-hf would refuse it
        reason = cut_to(report.unsupported_reason or "", MAX_ERROR_CHARS)
        return (
            f"UNSUPPORTED: {report.checkpoint} (intact; export-hf cannot convert it:"
            f" {reason}) {details}"
        )
    return f"{'valid' if report.ok(strict) else 'INVALID'}: {report.checkpoint} {details}"


def _details(report, strict: bool, deep: bool) -> str:
    """What the verdict line says of the checkpoint read, in parentheses."""
    from mfsdp_ckpt.format.folder_step import ShownStep, step_words

    role = f" {report.role}," if report.role else ""
    unhashed = f", {'+'.join(report.hash_algorithms)} checked" if report.hash_algorithms else ""
    unread = report.manifest_unread  # an error line names it too: the verdict fails on it
    if unread is not None:
        unhashed = f"; manifest.json unreadable ({unread}), so file hashes were not checked"
    elif not report.has_manifest:
        unhashed = "; no manifest, so file hashes were not checked" + (
            " (--strict requires one)" if strict else ""
        )
    optimizer = {True: ", optimizer state", False: ", no optimizer state"}.get(
        report.has_optimizer_state, ""
    )
    kind = report.optimizer_kind  # which optimizer's: a resume's setting must match it
    if report.has_optimizer_state and kind is not None and kind.name is not None:
        optimizer = f", {kind.name} optimizer state"
    return (
        f"({report.layout or 'layout unread'},{role} step "
        f"{step_words(ShownStep(report.step, report.step_from))}, {report.tensors} tensors, "
        f"{report.tensor_bytes / 2**20:.1f} MiB, {report.files} files{optimizer}"
        f"{f', {report.adapter}' if report.adapter else ''}"
        f"{', deep' if deep else ''}{unhashed})"
    )


from cli.export_hf import export_hf  # noqa: E402  (command defined in its own module)

ckpt.add_command(export_hf)
from cli.import_hf import import_hf  # noqa: E402

ckpt.add_command(import_hf)
