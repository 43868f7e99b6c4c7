"""How each fault of the matrix damages (or booby-traps) a copy of the pristine run: one
function per fault, each changing only what its fault names (the manifest is rehashed where
a file is changed on purpose, so no other check fires first)."""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import shutil
from pathlib import Path

import torch

from mfsdp_ckpt.format import layout
from tests.reliability.sft_run import step_dir
from tests.support.ckpt_edits import (
    RunsCode,
    biggest_shard,
    edit_manifest,
    edit_metadata,
    point_at_appended_blob,
    write_metadata,
)

MARKER = "pwned"  # a file a booby-trapped checkpoint tries to create next to the run dir
BAIT = "outside.distcp"  # a file outside the checkpoint that hostile paths point at


def dist_ckpt(run: Path) -> Path:
    return step_dir(run) / layout.DIST_CKPT_DIR


def _first_model_chunk(metadata, name: str = "model.model.norm.weight"):
    """(storage index, storage info) of the first stored chunk of a small model tensor."""
    item = metadata.state_dict_metadata[name]
    from torch.distributed.checkpoint.metadata import MetadataIndex

    index = MetadataIndex(name, item.chunks[0].offsets)
    return next(k for k in metadata.storage_data if k.fqn == index.fqn and k.offset == index.offset)


def marker_for(run: Path) -> Path:
    return run.parent / MARKER


def truncate_shard(run: Path) -> None:
    shard = biggest_shard(step_dir(run))
    shard.write_bytes(shard.read_bytes()[:-100])


def flip_byte(run: Path) -> None:
    shard = biggest_shard(step_dir(run))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))


def delete_shard(run: Path) -> None:
    biggest_shard(step_dir(run)).unlink()


def add_unknown_file(run: Path) -> None:
    (dist_ckpt(run) / "__7_0.distcp").write_bytes(b"left over from another save")


def drop_metadata_from_manifest(run: Path) -> None:
    """The manifest resealed without .metadata, which says what every shard byte means."""
    listed = f"{layout.DIST_CKPT_DIR}/{layout.DCP_METADATA_FILE}"
    edit_manifest(step_dir(run), lambda data: data["files"].pop(listed))


def edit_manifest_size(run: Path) -> None:
    name = f"{layout.DIST_CKPT_DIR}/{biggest_shard(step_dir(run)).name}"
    edit_manifest(
        step_dir(run), lambda data: data["files"][name].update(size=data["files"][name]["size"] + 1)
    )


def truncate_metadata(run: Path) -> None:
    path = dist_ckpt(run) / layout.DCP_METADATA_FILE
    path.write_bytes(path.read_bytes()[:200])


def tracker_names_missing_step(run: Path) -> None:
    (run / layout.TRACKER_FILE).write_text("7\n")


def drop_optimizer_state(run: Path) -> None:
    """The manifest still lists 'optimizer', but .metadata holds no optimizer entries."""

    def edit(metadata) -> None:
        for key in [k for k in metadata.state_dict_metadata if k.startswith("optimizer.")]:
            del metadata.state_dict_metadata[key]
        for index in [i for i in metadata.storage_data if i.fqn.startswith("optimizer.")]:
            del metadata.storage_data[index]

    edit_metadata(step_dir(run), edit)


def drop_storage_entry(run: Path) -> None:
    """What a save leaves when a writer thread's file fails silently (stock DCP): a chunk
    in the metadata with no storage entry."""
    edit_metadata(
        step_dir(run), lambda metadata: metadata.storage_data.pop(_first_model_chunk(metadata))
    )


def metadata_runs_code(run: Path) -> None:
    write_metadata(step_dir(run), pickle.dumps(RunsCode(marker_for(run))))


def blob_runs_code(run: Path) -> None:
    """A model tensor's blob is a torch.save of a code-running object (appended, metadata
    repointed, manifest updated): harmless only to a weights-only unpickler."""
    buffer = io.BytesIO()
    torch.save(RunsCode(marker_for(run)), buffer)

    def edit(metadata) -> None:
        index = _first_model_chunk(metadata)
        point_at_appended_blob(step_dir(run), metadata, index, buffer.getvalue())

    edit_metadata(step_dir(run), edit)


def manifest_path_traversal(run: Path) -> None:
    edit_manifest(
        step_dir(run),
        lambda data: data["files"].update({"../../x": {"size": 1, "sha256": "0" * 64}}),
    )


def metadata_path_traversal(run: Path) -> None:
    """.metadata sends every read of one shard to an identical copy outside the checkpoint."""
    shard = biggest_shard(step_dir(run))
    outside = run.parent / BAIT
    shutil.copy(shard, outside)
    escape = os.path.relpath(outside, dist_ckpt(run))

    def edit(metadata) -> None:
        for index, info in list(metadata.storage_data.items()):
            if info.relative_path == shard.name:
                metadata.storage_data[index] = dataclasses.replace(info, relative_path=escape)

    edit_metadata(step_dir(run), edit)


def symlink_out(run: Path) -> None:
    shard = biggest_shard(step_dir(run))
    outside = run.parent / BAIT
    shutil.copy(shard, outside)
    shard.unlink()
    shard.symlink_to(outside)


def absurd_shape(run: Path) -> None:
    """A tensor claims 2**40 x 2**40 fp32 elements (4 yottabytes)."""

    def edit(metadata) -> None:
        item = metadata.state_dict_metadata["model.model.norm.weight"]
        item.size = torch.Size([2**40, 2**40])

    edit_metadata(step_dir(run), edit)


def absurd_offset(run: Path) -> None:
    """A chunk claims to start 2**62 bytes into its file and be 2**41 bytes long."""

    def edit(metadata) -> None:
        index = _first_model_chunk(metadata)
        metadata.storage_data[index] = dataclasses.replace(
            metadata.storage_data[index], offset=2**62, length=2**41
        )

    edit_metadata(step_dir(run), edit)
