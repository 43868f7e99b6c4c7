"""Which files of a step a manifest of ours must list.

Every writer of an mfsdp step (`checkpointer._commit`, and `import-hf` into a run dir)
writes, and hashes into the manifest, `dist_ckpt/.metadata` and, with its huggingface/,
that dir's config.json (`save_hf_files` writes it first; import copies the model's); it
has done so since the first format_version. Those bytes decide what the step means:
`.metadata` says which bytes of the shards are which tensor (two storage entries swapped
turn k_proj into v_proj), config.json what model they make. A data file `.metadata` names
is checked against the manifest already (`storage_checks.check_files`). So a manifest
that leaves out one of these while it is there was not written so: it was rewritten after
the save, and the files' digests vouch for nothing. Which tokenizer files a save writes
depends on the tokenizer, so one the manifest does not list, as any other file (a note, a
stray shard no metadata names), is an unknown file: a warning.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from mfsdp_ckpt.format.layout import DCP_METADATA_FILE, DIST_CKPT_DIR, HF_ASSETS_DIR
from mfsdp_ckpt.format.model_files import HF_CONFIG_FILE

if TYPE_CHECKING:
    from mfsdp_ckpt.check.report import ValidationReport

UNLISTED = (
    "not listed in manifest.json, which lists every file mfsdp writes: the manifest was rewritten"
)

ALWAYS_WRITTEN = frozenset(
    {f"{DIST_CKPT_DIR}/{DCP_METADATA_FILE}", f"{HF_ASSETS_DIR}/{HF_CONFIG_FILE}"}
)


def unlisted(present: Iterable[str], listed: Collection[str]) -> tuple[list[str], list[str]]:
    """The files in `present` (paths in a step dir) that the manifest's `listed` leaves
    out, as (those our save always lists, ALWAYS_WRITTEN: the manifest was rewritten; the
    others: unknown files)."""
    missing = [name for name in present if name not in listed]
    rewritten = [name for name in missing if name in ALWAYS_WRITTEN]
    return rewritten, [name for name in missing if name not in ALWAYS_WRITTEN]


def found_rewritten(report: ValidationReport) -> bool:
    """Whether `report` holds the finding that a manifest leaves out a file our save lists."""
    return any(finding.message == UNLISTED for finding in report.findings)
