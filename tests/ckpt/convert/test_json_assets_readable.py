"""A JSON asset is copied or read only when its reader can read it: valid JSON nested at
most MAX_JSON_DEPTH deep (below the depth the `tokenizers` library reads tokenizer.json
to), and a generation_config.json that transformers builds its GenerationConfig from.

Was: a tokenizer.json 200,000 brackets deep, or one that was no JSON at all, passed
import-hf, `validate --deep` and `export-hf --verify` (exit 0: "other damage is left to the
reader"), and the export's tokenizer then loaded nowhere; a generation_config.json of
`max_new_tokens: -5` was exported, and `from_pretrained` refused the export."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mfsdp_ckpt.convert.import_hf import ImportFailedError, plan_model_import
from mfsdp_ckpt.storage.unique_json import (
    MAX_JSON_DEPTH,
    NestingError,
    loads_unique,
)
from tests.reliability.hf_model import hf_model
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES

SERDE_JSON_DEPTH = 128  # serde_json's default: `tokenizers` fails on a file this deep
DEEP = '{"x":' + "[" * 200_000 + "]" * 200_000 + "}"
BAD_GENERATION = '{"eos_token_id": "abc", "max_new_tokens": -5}'
# (file, text, words of the error line)
UNREADABLE = {
    "deep-tokenizer": ("tokenizer.json", DEEP, "not valid JSON (nested too deeply)"),
    "just-deeper-than-the-bound": (
        "tokenizer_config.json",
        "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1),
        "not valid JSON (nested too deeply)",
    ),
    "no-json": ("tokenizer.json", '{"model": ', "not valid JSON (Expecting value at line 1"),
    "bad-generation": ("generation_config.json", BAD_GENERATION, "`max_new_tokens` must be"),
}


def _export_run(root: Path) -> tuple[Path, Path]:
    """The mfsdp fixture run and its huggingface/ dir."""
    run = shutil.copytree(FIXTURES / "megatron_fsdp_qwen2" / "run", root / "run")
    return run, run / "global_step_2" / "huggingface"


def test_the_depth_bound_is_one_tokenizers_reads():
    """MAX_JSON_DEPTH is below the depth the `tokenizers` library (serde_json) gives up at,
    so a tokenizer.json nested as deep as the bound allows still loads."""
    from tokenizers import Tokenizer

    def nested(levels: int) -> str:
        """A tokenizer.json `levels` deep: normalizer Sequences in Sequences, 2 levels each."""
        inner: dict = {"type": "Lowercase"}
        for _ in range((levels - 2) // 2):
            inner = {"type": "Sequence", "normalizers": [inner]}
        model = {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}
        return json.dumps({"version": "1.0", "normalizer": inner, "model": model})

    assert MAX_JSON_DEPTH < SERDE_JSON_DEPTH
    loads_unique(nested(MAX_JSON_DEPTH))
    Tokenizer.from_str(nested(MAX_JSON_DEPTH))
    with pytest.raises(NestingError):
        loads_unique(nested(MAX_JSON_DEPTH + 2))
    with pytest.raises(Exception, match="recursion limit"):
        Tokenizer.from_str(nested(SERDE_JSON_DEPTH))


@pytest.mark.parametrize("case", list(UNREADABLE))
def test_import_refuses_an_unreadable_json_asset_before_writing(tmp_path, case):
    name, text, words = UNREADABLE[case]
    model = hf_model(tmp_path)
    (model / name).write_text(text)
    with pytest.raises(ImportFailedError, match="^" + str(model / name) + ": "):
        plan_model_import(model, layout_name="hf")  # reads no weight
    out = tmp_path / "out"
    code, _out, err = run_cli("ckpt", "import-hf", model, "--out", out, "--layout", "hf")
    assert code == 1, err
    one_error(err, str(model / name), words)
    assert not out.exists()


@pytest.mark.parametrize("case", list(UNREADABLE))
def test_validate_deep_and_export_refuse_an_unreadable_json_asset(tmp_path, case):
    name, text, words = UNREADABLE[case]
    run, assets = _export_run(tmp_path)
    (assets / name).write_text(text)
    code, stdout, _err = run_cli("ckpt", "validate", run, "--deep")
    assert code == 1, stdout
    errors = [line for line in stdout.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {assets / name}: "), stdout
    assert words in errors[0], stdout
    for source in (run, f"file://{run}"):
        code, _out, err = run_cli("ckpt", "export-hf", source, "--out", tmp_path / "hf", "--verify")
        assert code == 1, err
        where = f"file://{assets}/{name}" if str(source).startswith("file:") else assets / name
        one_error(err, str(where), words)
        assert not (tmp_path / "hf").exists()


def test_a_sound_generation_config_is_still_exported(tmp_path):
    run, assets = _export_run(tmp_path)
    sound = {"eos_token_id": [1, 2], "max_new_tokens": 5, "temperature": 0.7, "do_sample": True}
    (assets / "generation_config.json").write_text(json.dumps(sound))
    code, _out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 0, err
    assert json.loads((tmp_path / "hf" / "generation_config.json").read_text()) == sound


def test_a_generation_config_that_is_not_json_is_copied_as_transformers_skips_it(tmp_path):
    """transformers loads a model whose generation_config.json does not parse (it builds the
    generation config from config.json instead): refusing it refused models that load. One
    nested past the bound is still refused: that one stops transformers' own reader."""
    from mfsdp_ckpt.convert.export_source import check_generation_config, check_json_asset
    from mfsdp_ckpt.storage.byte_store import CheckpointFileError

    broken = b'{"eos_token_id": 2,}'
    check_json_asset("generation_config.json", tmp_path / "g.json", broken)
    check_generation_config(tmp_path / "g.json", broken)
    deep = b"[" * 5000 + b"]" * 5000
    with pytest.raises(CheckpointFileError, match="not valid JSON"):
        check_json_asset("generation_config.json", tmp_path / "g.json", deep)
