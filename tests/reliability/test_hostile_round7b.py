"""Hostile and damaged inputs round 7 left open, each refused in one line with the right
exit code:

* a DCP `.metadata` whose `storage_data` has an entry no state-dict entry reads (a key
  `state_dict_metadata` lacks, or offsets none of the tensor's chunks has): validate (and
  so resume and export) fails naming the key, as it fails a chunk with no storage entry;
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.format.dcp_metadata import MetadataIndex
from tests.support.ckpt_edits import edit_metadata
from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES

MFSDP_RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"  # mfsdp's layout, with a manifest
STEP = "global_step_2"
WEIGHT = "model.module.model.layers.0.self_attn.q_proj.weight"


def _one_error(stderr: str, *needles: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(MFSDP_RUN, run)
    return run


# --------------------------------------------------------------------------- storage entries
def _first_entry(metadata, fqn: str) -> MetadataIndex:
    return min((i for i in metadata.storage_data if i.fqn == fqn), key=lambda i: i.offset)


def _orphan_key(metadata) -> tuple[str, str]:
    index = _first_entry(metadata, WEIGHT)
    orphan = dataclasses.replace(index, fqn="model.module.ghost.weight")
    metadata.storage_data[orphan] = metadata.storage_data[index]
    return "model.module.ghost.weight", "a key state_dict_metadata does not have"


def _offsets_of_no_chunk(metadata) -> tuple[str, str]:
    index = _first_entry(metadata, WEIGHT)
    moved = dataclasses.replace(index, offset=(1, 1))
    metadata.storage_data[moved] = metadata.storage_data[index]
    return WEIGHT, "at offsets (1, 1) matches none of the tensor's chunks"


def _chunk_without_entry(metadata) -> tuple[str, str]:
    del metadata.storage_data[_first_entry(metadata, WEIGHT)]
    return WEIGHT, "has no storage entry"


@pytest.mark.parametrize("damage", [_orphan_key, _offsets_of_no_chunk, _chunk_without_entry])
def test_storage_entries_and_chunks_must_match_one_to_one(tmp_path, damage):
    run = _run(tmp_path)
    found = {}

    def edit(metadata):
        found["key"], found["words"] = damage(metadata)

    edit_metadata(run / STEP, edit)
    for deep in ([], ["--deep"]):
        code, out, err = run_cli("ckpt", "validate", run, *deep)
        assert code == 1, out + err
        assert f"[{found['key']}]" in out + err and found["words"] in out + err, out + err
        code, out, _err = run_cli("ckpt", "validate", run, "--json", *deep)
        assert code == 1 and json.loads(out)["valid"] is False
    code, _out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    assert code == 1, err
    _one_error(err, found["key"])
    assert not (tmp_path / "out").exists()

