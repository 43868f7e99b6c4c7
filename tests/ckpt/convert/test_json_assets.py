"""Every JSON file of a model's assets (tokenizer, generation and processor configs, added
tokens), read from a local dir or through a URL, is refused in one line naming the file and
the key when it gives a key twice or holds NaN/Infinity: by import-hf before a weight is
read, by export-hf and by training, through one check (`check_json_asset`)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.convert.export_source import MAX_ASSET_BYTES
from mfsdp_ckpt.convert.import_hf import ImportFailedError, plan_model_import
from tests.reliability.hf_model import hf_model
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.model_dirs import train_from
from tests.support.paths import FIXTURES

ASSETS = (
    "tokenizer_config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "added_tokens.json",
    "preprocessor_config.json",
)
TWICE = (
    '{"eos_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}',
    "key 'eos_token_id' appears twice",
)
NAN = ('{"eos_token_id": 1, "sampling": {"temperature": NaN}}', "sampling.temperature is nan")
INFINITY = ('{"scores": [0.5, -Infinity]}', "scores[1] is -inf")
DAMAGE = {"key-twice": TWICE, "nan": NAN, "infinity": INFINITY}


def _export_run(root: Path) -> tuple[Path, Path]:
    """The mfsdp fixture run and its huggingface/ dir."""
    run = shutil.copytree(FIXTURES / "megatron_fsdp_qwen2" / "run", root / "run")
    return run, run / "global_step_2" / "huggingface"


@pytest.mark.parametrize("layout", ["hf", "mcore"])
@pytest.mark.parametrize("name", ASSETS)
def test_import_refuses_a_damaged_json_asset_before_reading_weights(tmp_path, name, layout):
    """Was: the hf layout wrote every weight, then refused only five names (tokenizer.json
    was copied with a key twice); the mcore layout imported and named the dir for export
    and training, which refused it there."""
    for case, (text, words) in DAMAGE.items():
        (tmp_path / case).mkdir()
        model = hf_model(tmp_path / case)
        asset = model / name
        asset.write_text(text)
        with pytest.raises(ImportFailedError, match=re.escape(words)):
            plan_model_import(model, layout_name=layout)  # reads no weight
        out = tmp_path / case / "out"
        code, _out, err = run_cli("ckpt", "import-hf", model, "--out", out, "--layout", layout)
        assert code == 1, err
        one_error(err, str(asset), words)
        assert not out.exists()


def test_import_still_takes_sound_assets(tmp_path):
    model = hf_model(tmp_path)
    (model / "generation_config.json").write_text('{"temperature": 0.7, "eos_token_id": [1, 2]}')
    code, _out, err = run_cli(
        "ckpt", "import-hf", model, "--out", tmp_path / "out", "--layout", "hf"
    )
    assert code == 0, err
    copied = tmp_path / "out" / "global_step_0" / "huggingface" / "generation_config.json"
    assert json.loads(copied.read_text()) == {"temperature": 0.7, "eos_token_id": [1, 2]}


@pytest.mark.parametrize("case", list(DAMAGE))
@pytest.mark.parametrize("name", ["tokenizer.json", "added_tokens.json", "generation_config.json"])
def test_export_refuses_every_damaged_json_asset(tmp_path, name, case):
    """Was: only config, generation, tokenizer and special-tokens configs and chat_template.json
    were checked, for a key given twice only; NaN went into the export as it was."""
    text, words = DAMAGE[case]
    run, assets = _export_run(tmp_path)
    (assets / name).write_text(text)
    code, _out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 1, err
    one_error(err, str(assets / name), words)
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("case", list(DAMAGE))
def test_export_from_a_url_checks_the_assets_it_reads_there(tmp_path, case):
    """Was: a checkpoint named by URL (file://, gs://, s3://, http(s)://) had its assets
    copied unchecked: a key given twice or a NaN reached the export."""
    text, words = DAMAGE[case]
    run, assets = _export_run(tmp_path)
    (assets / "tokenizer_config.json").write_text(text)
    code, _out, err = run_cli("ckpt", "export-hf", f"file://{run}", "--out", tmp_path / "hf")
    assert code == 1, err
    one_error(err, f"file://{assets}/tokenizer_config.json", words)
    assert not (tmp_path / "hf").exists()


def test_export_from_a_url_refuses_an_asset_over_the_bound_unread(tmp_path):
    """Was: read whole into memory whatever its size (a local asset was bounded)."""
    run, assets = _export_run(tmp_path)
    huge = assets / "notes.txt"
    with open(huge, "wb") as handle:
        handle.truncate(MAX_ASSET_BYTES + 1)  # sparse: nothing is written
    code, _out, err = run_cli("ckpt", "export-hf", f"file://{run}", "--out", tmp_path / "hf")
    assert code == 1, err
    one_error(err, f"file://{huge}", f"more than the {MAX_ASSET_BYTES}")
    assert not (tmp_path / "hf").exists()
    os.unlink(huge)


@pytest.mark.parametrize("case", ["key-twice", "nan"])
@pytest.mark.parametrize("name", ["tokenizer.json", "generation_config.json"])
def test_training_refuses_a_damaged_json_asset(tmp_path, trainable, name, case):
    """Was: trained (tokenizer.json giving `version` twice, a generation_config.json
    temperature of NaN). Refused before launch, as a damaged config.json is (exit 2)."""
    source, table = trainable
    model = shutil.copytree(source, tmp_path / "model")
    data = json.loads((model / name).read_text())
    if case == "nan":
        data["temperature"] = float("nan")
        (model / name).write_text(json.dumps(data))
        words = "temperature is nan"
    else:
        key = next(iter(data))
        (model / name).write_text(
            "{" + json.dumps(key) + ": " + json.dumps(data[key]) + ", " + json.dumps(data)[1:]
        )
        words = f"key {key!r} appears twice"
    code, err = train_from(model, table, tmp_path / "run")
    assert code == 2, err
    one_error(err, str(model / name), words)
