"""A config.json that is not a JSON object, or whose model_type is not a string, is refused
saying what was found there: "no model_type" sent the user looking for a key the file has
(`"model_type": ["qwen2"]`), or for one in a file that is no object at all (`[1, 2]`)."""

from __future__ import annotations

import json

import pytest

from mfsdp_ckpt.convert.hf_config import HFConfigError, parse_config_json, read_config_json
from tests.support.hf_model_files import saved_hf_model
from tests.support.interop_layouts import run_cli

CASES = {
    "a list": ("[1, 2]", "expected a JSON object, found list"),
    "a string": ('"qwen2"', "expected a JSON object, found str"),
    "model_type a list": (
        '{"model_type": ["qwen2"]}',
        "model_type must be a string, got ['qwen2']",
    ),
    "model_type a number": ('{"model_type": 2}', "model_type must be a string, got 2"),
    "model_type null": ('{"model_type": null}', "model_type must be a string, got None"),
    "no model_type": ('{"hidden_size": 8}', "no model_type"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_read_names_what_was_found(case, tmp_path):
    text, said = CASES[case]
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(HFConfigError) as read:
        read_config_json(tmp_path)
    assert str(read.value) == f"{path}: {said}"
    with pytest.raises(HFConfigError) as parsed:
        parse_config_json(text, "given/config.json")
    assert str(parsed.value) == f"given/config.json: {said}"


@pytest.mark.parametrize("case", ["a list", "model_type a list"])
def test_import_hf_names_what_was_found(case, tmp_path):
    text, said = CASES[case]
    model = saved_hf_model(tmp_path, "qwen2", tied=False)
    (model / "config.json").write_text(text)
    code, _stdout, err = run_cli("ckpt", "import-hf", model, "--out", tmp_path / "out")
    assert code == 1, err
    assert err.strip().splitlines() == [f"error: {model / 'config.json'}: {said}"]


def test_model_type_shown_bounded(tmp_path):
    """A crafted model_type of a megabyte is shown in its first 80 characters."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": ["q" * 1_000_000]}))
    with pytest.raises(HFConfigError) as read:
        read_config_json(path)
    assert len(str(read.value)) < len(str(path)) + 140
