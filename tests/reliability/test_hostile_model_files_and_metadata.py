"""Damaged DCP metadata, config numbers no field can hold, and model dir files that are
unreadable, linked out, special or damaged, each refused in one line with the right exit
code:

* a DCP `.metadata` whose `storage_data` has an entry no state-dict entry reads (a key
  `state_dict_metadata` lacks, or offsets none of the tensor's chunks has): validate (and
  so resume and export) fails naming the key, as it fails a chunk with no storage entry;
* a config number no field can hold (an integer past int64, one too long for Python to
  read, a float that overflows to inf): one line naming the key (exit 2) before any work,
  not torch's ValueError from `manual_seed` in every rank;
* a `huggingface/` dir this user may not open: validate (plain, --json, --deep) fails
  naming it as an unreadable checkpoint dir is named, not errno's raw line about a
  file inside it (or, without a manifest, "valid" having skipped the config check);
* a weight file or index of a Hugging Face model dir that is a symlink out of it: import
  refuses it as it refuses a config or tokenizer linked out (a cache snapshot's links into
  its blobs/ still import), and validate --hf-config refuses a config.json linked out;
* a FIFO, a device or a directory where a model file, data file or reward file belongs:
  refused naming it, not skipped for another file ("several .safetensors files and no
  index") or called missing;
* model.safetensors beside an index: import reads model.safetensors, as transformers
  does, with a note that the index was ignored;
* a config.json that is in the model dir but damaged (not JSON, no model_type, impossible
  sizes, unreadable, linked out): a failed import (exit 1), not bad usage (exit 2).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.format.dcp_metadata import MetadataIndex
from tests.reliability.hf_model import hf_model
from tests.support.ckpt_edits import edit_metadata
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.model_dirs import shard_with_index
from tests.support.paths import FIXTURES, REPO
from tests.support.permissions import run_cli_denied

MFSDP_RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"  # mfsdp's layout, with a manifest
STEP = "global_step_2"
WEIGHT = "model.module.model.layers.0.self_attn.q_proj.weight"


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
    one_error(err, found["key"])
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
    one_error(err, "trainer.seed", "64 bits")
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
    records = run_cli_denied(cases, unreadable=assets)
    for args, record in zip(cases, records, strict=True):
        assert record["escaped"] is None and record["exit"] == 1, (args, record)
        line = one_error(record["stderr"], "cannot open (Permission denied)")
        assert line == f"error: {assets}: cannot open (Permission denied)", line
        if "--json" in args:
            assert json.loads(record["stdout"]) == {"error": line[len("error: ") :], "exit_code": 1}


# --------------------------------------------------------------------------- model dir files
def _import(model: Path, out: Path, *options) -> tuple[int, str, str]:
    return run_cli("ckpt", "import-hf", model, "--out", out, *options)


def _move_out(path: Path, elsewhere: Path) -> None:
    elsewhere.mkdir(exist_ok=True)
    path.rename(elsewhere / path.name)
    path.symlink_to(elsewhere / path.name)


@pytest.mark.parametrize(
    "linked",
    ["model.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"],
)
def test_import_refuses_weights_linked_out_of_the_model_dir(tmp_path, linked):
    model = hf_model(tmp_path)
    if linked != "model.safetensors":
        shard_with_index(model)
    _move_out(model / linked, tmp_path / "elsewhere")
    code, _out, err = _import(model, tmp_path / "out")
    assert code == 1, err
    one_error(err, str(model / linked), f"resolves outside the model dir {model}")
    assert not (tmp_path / "out").exists()


def test_a_cache_snapshot_whose_weights_link_into_blobs_imports(tmp_path):
    """models--ORG--NAME/snapshots/REV/FILE -> ../../blobs/HASH, as the Hugging Face cache
    lays a download out: weights and index included."""
    built = hf_model(tmp_path)
    shard_with_index(built)
    cache = tmp_path / "models--org--name"
    snapshot, blobs = cache / "snapshots" / "0123abc", cache / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for index, file in enumerate(sorted(built.iterdir())):
        file.rename(blobs / f"hash{index}")
        (snapshot / file.name).symlink_to(Path("..") / ".." / "blobs" / f"hash{index}")
    code, _out, err = _import(snapshot, tmp_path / "out", "--layout", "hf")
    assert code == 0, err


@pytest.mark.parametrize(
    ("special", "what"),
    [
        ("model.safetensors.index.json", "a FIFO"),
        ("model.safetensors", "a FIFO"),
        ("model.safetensors", "a directory"),
        ("model-00001-of-00002.safetensors", "a FIFO"),
        ("only.safetensors", "a FIFO"),
        ("config.json", "a FIFO"),
    ],
)
def test_a_special_file_where_a_model_file_belongs_is_refused_naming_it(tmp_path, special, what):
    model = hf_model(tmp_path)
    if special in ("model.safetensors.index.json", "model-00001-of-00002.safetensors"):
        shard_with_index(model)  # the index stays the only one: transformers would read it
    path = model / special
    if special == "only.safetensors":
        (model / "model.safetensors").unlink()
    path.unlink(missing_ok=True)
    os.mkfifo(path) if what == "a FIFO" else path.mkdir()
    code, _out, err = _import(model, tmp_path / "out")
    assert code == 1, err
    one_error(err, f"{path}: {what}, not a regular file")
    assert not (tmp_path / "out").exists()


def test_model_safetensors_wins_over_an_index_beside_it_as_in_transformers(tmp_path):
    """transformers' from_pretrained takes model.safetensors when both are there; import
    takes the same file and says the index was ignored (here it names shards that do not
    exist, which import used to fail on)."""
    model = hf_model(tmp_path)
    index = model / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"model.norm.weight": "gone.safetensors"}}))
    code, _out, err = _import(model, tmp_path / "out")
    assert code == 0, err
    assert f"note: {index} ignored: model.safetensors is there too" in err


def _bad_json(config: Path) -> str:
    config.write_text("{bad")
    return "not valid JSON"


def _no_model_type(config: Path) -> str:
    config.write_text("{}")
    return "no model_type"


def _negative_size(config: Path) -> str:
    config.write_text(json.dumps({**json.loads(config.read_text()), "hidden_size": -8}))
    return "hidden_size must be a positive integer"


def _linked_out(config: Path) -> str:
    _move_out(config, config.parent.parent / "elsewhere")
    return "resolves outside the model dir"


@pytest.mark.parametrize("damage", [_bad_json, _no_model_type, _negative_size, _linked_out])
def test_a_damaged_config_json_in_a_model_dir_is_a_failed_import(tmp_path, damage):
    model = hf_model(tmp_path)
    words = damage(model / "config.json")
    code, _out, err = _import(model, tmp_path / "out")
    assert code == 1, err
    one_error(err, str(model / "config.json"), words)


def test_a_config_json_this_user_cannot_read_is_a_failed_import(tmp_path):
    model = hf_model(tmp_path)
    config = model / "config.json"
    (record,) = run_cli_denied(
        [["ckpt", "import-hf", str(model), "--out", str(tmp_path / "o")]], unreadable=config
    )
    assert record["escaped"] is None and record["exit"] == 1, record
    one_error(record["stderr"], str(config), "Permission denied")


def test_the_wrong_dir_stays_a_usage_error(tmp_path):
    model = hf_model(tmp_path)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    code, _out, err = _import(model, tmp_path / "out")
    assert code == 2, err
    one_error(err, "model family 'bert' is not one import-hf reads")
    (model / "config.json").unlink()
    code, _out, err = _import(model, tmp_path / "out")
    assert code == 2, err
    one_error(err, "no config.json; not a Hugging Face model dir")


def test_a_fifo_given_as_a_data_or_reward_file_is_named(tmp_path):
    from tests.support.data_tables import read_rows
    from trainer.data.files import DataFileError
    from trainer.rewards.custom import RewardError, load_reward_function

    fifo = tmp_path / "train.parquet"
    os.mkfifo(fifo)
    code, _out, err = run_cli(
        "train",
        "sft",
        "--config",
        REPO / "examples" / "sft_tiny_cpu.yaml",
        f"data.train_files={fifo}",
        f"trainer.run_dir={tmp_path / 'run'}",
    )
    assert code == 2, err
    one_error(err, f"data.train_files: {fifo}: a FIFO, not a regular file")
    with pytest.raises(DataFileError, match="a FIFO, not a regular file"):
        read_rows([str(fifo)])
    with pytest.raises(RewardError, match="a FIFO, not a regular file"):
        load_reward_function(fifo)


def test_validate_refuses_an_hf_config_linked_out_of_its_dir(tmp_path):
    model = hf_model(tmp_path)
    _linked_out(model / "config.json")
    code, out, err = run_cli("ckpt", "validate", MFSDP_RUN, "--hf-config", model)
    assert code == 2, out + err  # bad usage, as export-hf says: no verdict on the checkpoint
    assert f"{model / 'config.json'}: resolves outside the model dir {model}" in err, err
