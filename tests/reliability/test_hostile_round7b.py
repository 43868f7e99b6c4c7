"""Hostile and damaged inputs round 7 left open, each refused in one line with the right
exit code:

* a DCP `.metadata` whose `storage_data` has an entry no state-dict entry reads (a key
  `state_dict_metadata` lacks, or offsets none of the tensor's chunks has): validate (and
  so resume and export) fails naming the key, as it fails a chunk with no storage entry;
* a config number no field can hold (an integer past int64, one too long for Python to
  read, a float that overflows to inf): one line naming the key (exit 2) before any work,
  not torch's ValueError from `manual_seed` in every rank;
* a `huggingface/` dir this user may not open: validate (plain, --json, --deep) fails
  naming it as round 7 names an unreadable checkpoint dir, not errno's raw line about a
  file inside it (or, without a manifest, "valid" having skipped the config check);
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.format.dcp_metadata import MetadataIndex
from tests.reliability.test_hostile_round7 import _run_denied
from tests.support.ckpt_edits import edit_metadata
from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES, REPO

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


# --------------------------------------------------------------------------- config numbers
def test_an_integer_past_int64_in_the_config_is_a_usage_error_naming_the_key(tmp_path):
    code, _out, err = run_cli(
        "train",
        "sft",
        "--config",
        REPO / "examples" / "sft_tiny_cpu.yaml",
        "trainer.seed=99999999999999999999999",
        f"trainer.run_dir={tmp_path / 'run'}",
    )
    assert code == 2, err
    _one_error(err, "trainer.seed", "64 bits")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("trainer.seed=-99999999999999999999999", "'trainer.seed' must fit in 64 bits"),
        ("checkpoint.keep_last=9223372036854775808", "'checkpoint.keep_last' must fit in 64"),
        ("model.lora_rank=99999999999999999999999", "'model.lora_rank' must fit in 64 bits"),
        ("optim.lr=1" + "0" * 400, "'optim.lr' must be a finite number, got 100"),
        ("optim.betas=[0.9, 1e999]", "'optim.betas[1]' must be a finite number"),
        ("optim.lr=.nan", "'optim.lr' must be a finite number"),
        ("trainer.seed=" + "9" * 5000, "override trainer.seed: integer at line 1 has 5000 digits"),
        ("model.overrides={hidden_size: 99999999999999999999999}", "model.overrides"),
    ],
)
def test_numbers_out_of_any_fields_range_are_refused_naming_the_key(override, words):
    from trainer.config import ConfigError, SFTConfig, load_config

    with pytest.raises(ConfigError, match=re.escape(words)) as caught:
        load_config(SFTConfig, REPO / "examples" / "sft_tiny_cpu.yaml", [override])
    assert len(str(caught.value)) < 300 and "\n" not in str(caught.value)
    assert (
        load_config(SFTConfig, None, ["trainer.seed=9223372036854775807"]).trainer.seed == 2**63 - 1
    )


def test_a_config_json_size_past_int64_is_refused_naming_it():
    from mfsdp_ckpt.convert.hf_config import HFConfigError, check_geometry

    with pytest.raises(HFConfigError, match="hidden_size must be a positive integer below 2"):
        check_geometry({"hidden_size": 2**64}, "config.json")


# --------------------------------------------------------------------------- unreadable assets
@pytest.mark.parametrize("manifest", [True, False])
def test_validate_names_a_huggingface_dir_this_user_cannot_open(tmp_path, manifest):
    run = _run(tmp_path)
    if not manifest:  # as verl writes it: nothing lists huggingface/config.json
        (run / STEP / "manifest.json").unlink()
    assets = run / STEP / "huggingface"
    cases = [["ckpt", "validate", str(run), *extra] for extra in ([], ["--json"], ["--deep"])]
    assets.chmod(0)
    try:
        records = _run_denied(cases)
    finally:
        assets.chmod(0o755)
    for args, record in zip(cases, records, strict=True):
        assert record["escaped"] is None and record["exit"] == 1, (args, record)
        line = _one_error(record["stderr"], "cannot open (Permission denied)")
        assert line == f"error: {assets}: cannot open (Permission denied)", line
        if "--json" in args:
            assert json.loads(record["stdout"]) == {"error": line[len("error: ") :], "exit_code": 1}
