"""The fault matrix as data, shared by tests/reliability/test_reliability_matrix.py and
scripts/reliability_report.py (which writes docs/reliability.md), so the documented outcomes
are the tested ones.

Each `Fault` names a damage (tests/reliability/damage.py) and what each consumer must then
do: `mfsdp ckpt validate --deep`, `mfsdp ckpt export-hf` and `mfsdp train sft` resuming
(`checkpoint.resume=auto`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.reliability.damage import (
    absurd_offset,
    absurd_shape,
    add_unknown_file,
    blob_runs_code,
    delete_shard,
    drop_metadata_from_manifest,
    drop_optimizer_state,
    drop_storage_entry,
    edit_manifest_size,
    flip_byte,
    manifest_path_traversal,
    marker_for,
    metadata_path_traversal,
    metadata_runs_code,
    symlink_out,
    tracker_names_missing_step,
    truncate_metadata,
    truncate_shard,
)
from tests.reliability.outcome import Expect, Observed, Outcome, invoke
from tests.reliability.sft_run import BASE_STEP, fresh_copy, sft_args, tree_digest


def run_validate(run: Path) -> Outcome:
    return invoke(["ckpt", "validate", run, "--deep"])


def run_export(run: Path) -> Outcome:
    return invoke(["ckpt", "export-hf", run, "--out", run.parent / "hf"])


def run_resume(run: Path) -> Outcome:
    return invoke(sft_args(run.parent / "train.jsonl", run, f"trainer.total_steps={BASE_STEP + 1}"))


CONSUMERS: dict[str, Callable[[Path], Outcome]] = {
    "validate": run_validate,
    "export-hf": run_export,
    "resume": run_resume,
}


@dataclass(frozen=True)
class Fault:
    name: str
    kind: str  # corruption | hostile
    what: str  # what is damaged, for the report
    inflict: Callable[[Path], None]
    expect: dict[str, Expect] = field(default_factory=dict)  # consumer -> expectation


REFUSED = 1  # a bad checkpoint is a failed run/check (exit 1); a path that is not one is usage (2)

FAULTS: tuple[Fault, ...] = (
    Fault(
        "truncated_shard",
        "corruption",
        "largest .distcp loses its last 100 bytes",
        truncate_shard,
        {
            "validate": Expect(1, "(truncated)"),
            "export-hf": Expect(REFUSED, "truncated"),
            "resume": Expect(REFUSED, "truncated"),
        },
    ),
    Fault(
        "flipped_byte",
        "corruption",
        "one byte in the middle of the largest .distcp inverted",
        flip_byte,
        {
            "validate": Expect(1, "xxh3_128 differs from the manifest"),
            "export-hf": Expect(
                0,
                wrote_nothing=False,
                note="plain export does not hash the files, which hold the optimizer's "
                "bytes too (hashing would triple its reads): it checks the CRC torch.save "
                "wrote for each model tensor record it reads, so a byte changed outside "
                "those passes; `export-hf --verify`, `validate --deep` and resume catch it "
                "(without a manifest, `validate --deep` and `--verify` by the CRC torch.save "
                "wrote for each tensor record); a data file of another step, whose records "
                "pass their own CRCs, is refused by the CRC the manifest records for each "
                "model record (`model_records`)",
            ),
            "resume": Expect(REFUSED, "xxh3_128"),
        },
    ),
    Fault(
        "deleted_shard",
        "corruption",
        "largest .distcp deleted",
        delete_shard,
        {
            "validate": Expect(1, "missing"),
            "export-hf": Expect(REFUSED, "missing"),
            "resume": Expect(REFUSED, "missing"),
        },
    ),
    Fault(
        "unknown_file",
        "corruption",
        "an extra __7_0.distcp no manifest or metadata names",
        add_unknown_file,
        {
            "validate": Expect(0, "not listed in the manifest (unknown file)"),
            "export-hf": Expect(0, wrote_nothing=False),
            "resume": Expect(0, wrote_nothing=False),
        },
    ),
    Fault(
        "manifest_rewritten",
        "corruption",
        "manifest.json resealed without dist_ckpt/.metadata",
        drop_metadata_from_manifest,
        {
            "validate": Expect(1, "not listed in manifest.json"),
            "export-hf": Expect(REFUSED, "not listed in manifest.json"),
            "resume": Expect(REFUSED, "not listed in manifest.json"),
        },
    ),
    Fault(
        "manifest_size_edited",
        "corruption",
        "manifest.json: one file's size + 1",
        edit_manifest_size,
        {
            "validate": Expect(1, "manifest says"),
            "export-hf": Expect(REFUSED, "manifest says"),
            "resume": Expect(REFUSED, "manifest says"),
        },
    ),
    Fault(
        "metadata_truncated",
        "corruption",
        ".metadata cut to its first 200 bytes",
        truncate_metadata,
        {
            "validate": Expect(1, "unreadable DCP metadata"),
            "export-hf": Expect(REFUSED, "unreadable DCP metadata"),
            "resume": Expect(REFUSED, "unreadable DCP metadata"),
        },
    ),
    Fault(
        "tracker_missing_step",
        "corruption",
        "tracker names step 7, which does not exist",
        tracker_names_missing_step,
        {
            "validate": Expect(1, "names step 7, which is missing or incomplete"),
            "export-hf": Expect(1, "names step 7"),  # damaged data, not bad usage
            "resume": Expect(
                0,
                wrote_nothing=False,
                note="resume=auto takes the newest complete step (2) when the "
                "tracker names a missing one; the checkpoint it loads is intact",
            ),
        },
    ),
    Fault(
        "optimizer_absent",
        "corruption",
        "manifest lists 'optimizer'; .metadata has no optimizer state",
        drop_optimizer_state,
        {
            "validate": Expect(
                1, "manifest lists 'optimizer' but the checkpoint has no optimizer state"
            ),
            "export-hf": Expect(REFUSED, "no optimizer state"),
            "resume": Expect(REFUSED, "no optimizer state"),
        },
    ),
    Fault(
        "storage_entry_missing",
        "corruption",
        ".metadata: a model chunk has no storage entry",
        drop_storage_entry,
        {
            "validate": Expect(1, "has no storage entry"),
            "export-hf": Expect(REFUSED, "has no storage entry"),
            "resume": Expect(REFUSED, "has no storage entry"),
        },
    ),
    Fault(
        "metadata_runs_code",
        "hostile",
        ".metadata is a pickle that calls os.system",
        metadata_runs_code,
        {
            "validate": Expect(1, "refusing to load global"),
            "export-hf": Expect(REFUSED, "refusing to load global"),
            "resume": Expect(REFUSED, "refusing to load global"),
        },
    ),
    Fault(
        "blob_runs_code",
        "hostile",
        "a model tensor's blob is a torch.save that calls os.system",
        blob_runs_code,
        {
            "validate": Expect(1, "refusing to load global"),
            "export-hf": Expect(REFUSED, "refusing to load global"),
            "resume": Expect(REFUSED, "refusing to load global"),
        },
    ),
    Fault(
        "manifest_path_traversal",
        "hostile",
        "manifest.json lists '../../x'",
        manifest_path_traversal,
        {
            "validate": Expect(1, "escapes the checkpoint directory"),
            "export-hf": Expect(REFUSED, "escapes the checkpoint directory"),
            "resume": Expect(REFUSED, "escapes the checkpoint directory"),
        },
    ),
    Fault(
        "metadata_path_traversal",
        "hostile",
        ".metadata points a shard at '../../outside.distcp'",
        metadata_path_traversal,
        {
            "validate": Expect(1, "escapes the checkpoint directory"),
            "export-hf": Expect(REFUSED, "escapes the checkpoint directory"),
            "resume": Expect(REFUSED, "escapes the checkpoint directory"),
        },
    ),
    Fault(
        "symlink_out",
        "hostile",
        "largest .distcp is a symlink to a copy outside the checkpoint",
        symlink_out,
        {
            "validate": Expect(1, "outside the checkpoint"),
            "export-hf": Expect(REFUSED, "outside the checkpoint"),
            "resume": Expect(REFUSED, "outside the checkpoint"),
        },
    ),
    Fault(
        "absurd_shape",
        "hostile",
        "a tensor claims shape (2**40, 2**40)",
        absurd_shape,
        {
            "validate": Expect(1, "absurdly large"),
            "export-hf": Expect(REFUSED, "absurdly large"),
            "resume": Expect(REFUSED, "absurdly large"),
        },
    ),
    Fault(
        "absurd_offset",
        "hostile",
        "a chunk claims offset 2**62, length 2**41",
        absurd_offset,
        {
            "validate": Expect(1, "truncated"),
            "export-hf": Expect(REFUSED, "truncated"),
            "resume": Expect(REFUSED, "truncated"),
        },
    ),
)


def apply_and_consume(fault: Fault, pristine: Path, scratch: Path, consumer: str) -> Observed:
    """Inflict `fault` on a fresh copy, run `consumer`, check its expectation and side effects."""
    run = fresh_copy(pristine, scratch)
    fault.inflict(run)
    before = tree_digest(run)
    outcome = CONSUMERS[consumer](run)
    expect = fault.expect[consumer]
    problems = expect.check(outcome)
    if marker_for(run).exists():
        problems.append("the checkpoint ran code (marker file created)")
    if outcome.exit_code != 0 and expect.wrote_nothing:
        if (run.parent / "hf").exists() or list(run.parent.glob(".hf.export-*")):
            problems.append("a partial export was left behind")
        if tree_digest(run) != before:
            problems.append("the run dir changed")
    return Observed(outcome, problems)
