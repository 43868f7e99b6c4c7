"""What parsing a JSON asset may cost is bounded before it is parsed, and each asset
transformers reads by name must hold a JSON object; `validate --deep` refuses what export
refuses.

Was: a 50 MB `[{},{},...]` special_tokens_map.json in a checkpoint's huggingface/ took
export-hf to 3.6 GB of memory (and a JSON asset may have 1 GiB); a tokenizer_config.json
holding a JSON list passed `validate --deep`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.convert import export_source
from mfsdp_ckpt.convert.export_source import (
    MAX_JSON_ASSET_BYTES,
    MAX_JSON_ASSET_CONTAINERS,
    check_json_asset,
)
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES


def _run(root: Path) -> tuple[Path, Path]:
    """A copy of the mfsdp fixture run and its huggingface/ dir."""
    run = shutil.copytree(FIXTURES / "megatron_fsdp_qwen2" / "run", root / "run")
    return run, run / "global_step_2" / "huggingface"


def _crowded(containers: int) -> bytes:
    """`[{},{},...]`: `containers` objects and arrays in three bytes each."""
    return b"[" + b"{}," * (containers - 2) + b"{}]"


def test_an_asset_holding_too_many_objects_is_refused_unparsed(monkeypatch):
    def parse(_data):
        raise AssertionError("parsed")

    monkeypatch.setattr(export_source, "loads_unique", parse)
    with pytest.raises(CheckpointFileError) as refused:
        check_json_asset(
            "special_tokens_map.json",
            "hf/special_tokens_map.json",
            _crowded(MAX_JSON_ASSET_CONTAINERS + 1),
        )
    assert str(refused.value).startswith(
        f"hf/special_tokens_map.json: {MAX_JSON_ASSET_CONTAINERS + 1} '{{' and '[' characters,"
        f" more JSON objects and arrays than the {MAX_JSON_ASSET_CONTAINERS}"
    )


def test_a_real_sized_tokenizer_json_passes():
    """Llama 3's tokenizer.json: 128k tokens, 280k merges, each merge an array."""
    tokenizer = {
        "added_tokens": [{"id": i, "content": f"<|reserved_{i}|>"} for i in range(256)],
        "model": {
            "type": "BPE",
            "vocab": {f"t{i}": i for i in range(128_000)},
            "merges": [[f"a{i}", f"b{i}"] for i in range(280_000)],
        },
    }
    check_json_asset("tokenizer.json", "tokenizer.json", json.dumps(tokenizer).encode())


def test_export_refuses_a_crowded_asset_in_one_line(tmp_path):
    run, hf = _run(tmp_path)
    asset = hf / "special_tokens_map.json"
    asset.write_bytes(_crowded(MAX_JSON_ASSET_CONTAINERS + 1))
    code, _out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    assert code == 1, err
    one_error(err, str(asset), "more JSON objects and arrays than the")
    assert not (tmp_path / "out").exists()


def test_a_json_asset_over_its_bound_is_refused_unread(tmp_path):
    run, hf = _run(tmp_path)
    asset = hf / "tokenizer.json"
    with open(asset, "wb") as handle:
        handle.truncate(MAX_JSON_ASSET_BYTES + 1)  # sparse: nothing is written
    code, _out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    assert code == 1, err
    one_error(err, str(asset), f"more than the {MAX_JSON_ASSET_BYTES}")


@pytest.mark.parametrize(
    ("name", "text", "kind"),
    [
        ("tokenizer_config.json", "[" + "1," * 1000 + "1]", "list"),
        ("generation_config.json", '"greedy"', "str"),
        ("special_tokens_map.json", "null", "NoneType"),
    ],
)
def test_an_asset_transformers_reads_as_an_object_must_be_one(tmp_path, name, text, kind):
    run, hf = _run(tmp_path)
    (hf / name).write_text(text)
    words = f"holds a JSON {kind}, not the object transformers reads from a {name}"
    code, _out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    assert code == 1, err
    one_error(err, str(hf / name), words)
    errors = [(f.where, f.message) for f in validate_checkpoint(run, deep=True).findings]
    assert (str(hf / name), words) in errors
    assert (str(hf / name), words) not in [
        (f.where, f.message) for f in validate_checkpoint(run).findings
    ]  # the cheap checks read no asset


def test_validate_deep_refuses_a_crowded_asset(tmp_path):
    run, hf = _run(tmp_path)
    (hf / "special_tokens_map.json").write_bytes(_crowded(MAX_JSON_ASSET_CONTAINERS + 1))
    errors = [f for f in validate_checkpoint(run, deep=True).findings if f.severity == "error"]
    assert [f.where for f in errors] == [str(hf / "special_tokens_map.json")]
    assert "more JSON objects and arrays than the" in errors[0].message
