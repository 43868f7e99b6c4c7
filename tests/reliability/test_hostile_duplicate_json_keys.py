"""JSON files giving a key twice, and library log lines quoting hostile values:

* a JSON file giving a key twice (`{"eos_token_id": 1, ..., "eos_token_id": 2}`) in a model's
  config.json, generation_config.json or tokenizer_config.json, a safetensors index, mfsdp's
  manifest.json or verl's ckpt_contents.json: Python's json (and transformers) kept the last
  value silently, so which one was meant was never asked. Each is refused in one line naming
  the file and the key, with the exit code a malformed file of that kind already had;
* log lines of libraries that print through handlers of their own (transformers puts one
  on its "transformers" logger): our loggers' lines, Python's fallback handler's and
  warnings were escaped (test_hostile_log_lines_and_chat_templates.py), but these still
  printed a newline or an ANSI escape in a path or config value raw, forging a line or
  recolouring the terminal.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.hf_model import hf_model
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import one_error_line, run_cli, verl_rl_v2
from tests.support.model_dirs import shard_with_index, train_from
from tests.support.paths import FIXTURES, REPO
from tests.support.terminal import FORGED, no_forged_lines


# --------------------------------------------------------------------------- keys given twice
def _twice(path: Path) -> str:
    """Give the file's first key a second time (same value); the key as errors quote it."""
    text = path.read_text()
    key, value = next(iter(json.loads(text).items()))
    path.write_text("{" + json.dumps(key) + ": " + json.dumps(value) + ", " + text.lstrip()[1:])
    return repr(key)


def _malformed(path: Path) -> None:
    path.write_text("{bad")


def _mfsdp_run(root: Path) -> Path:
    run = root / "run"
    shutil.copytree(FIXTURES / "megatron_fsdp_qwen2" / "run", run)
    return run


def _manifest(root: Path) -> tuple[Path, tuple[str, ...]]:
    run = _mfsdp_run(root)
    return run / "global_step_2" / "manifest.json", ("ckpt", "validate", run)


def _hf_config(root: Path) -> tuple[Path, tuple[str, ...]]:
    run = _mfsdp_run(root)
    out = root / "hf"
    return run / "global_step_2" / "huggingface" / "config.json", (
        "ckpt",
        "export-hf",
        run,
        "--out",
        out,
    )


def _verl_contents(root: Path) -> tuple[Path, tuple[str, ...]]:
    laid = verl_rl_v2(FIXTURES / "mcore_optim" / "qwen2", root)
    return laid.levels["actor"] / "ckpt_contents.json", ("ckpt", "inspect", laid.run)


def _safetensors_index(root: Path) -> tuple[Path, tuple[str, ...]]:
    root.mkdir()
    model = hf_model(root)
    shard_with_index(model)
    return model / "model.safetensors.index.json", (
        "ckpt",
        "import-hf",
        model,
        "--out",
        root / "out",
    )


FILES = {
    "manifest.json": _manifest,
    "config.json": _hf_config,
    "ckpt_contents.json": _verl_contents,
    "safetensors-index": _safetensors_index,
}


@pytest.mark.parametrize("case", list(FILES))
def test_a_key_given_twice_is_refused_as_malformed_json_is(tmp_path, case):
    """Was: exit 0, the last value used. Now the exit code of a file that is not JSON."""
    malformed, command = FILES[case](tmp_path / "malformed")
    _malformed(malformed)
    malformed_code, _out, _err = run_cli(*command)
    assert malformed_code != 0
    twice, command = FILES[case](tmp_path / "twice")
    key = _twice(twice)
    code, out, err = run_cli(*command)
    assert code == malformed_code, out + err
    line = out + err if "error:" not in err else one_error_line(err)
    assert str(twice) in line and f"key {key} appears twice" in line, out + err


def test_a_tensor_named_twice_in_the_index_is_refused(tmp_path):
    """The index maps one tensor to two shards: which file holds it?"""
    model = hf_model(tmp_path)
    shard_with_index(model)
    index = model / "model.safetensors.index.json"
    weight_map = json.loads(index.read_text())["weight_map"]
    name, shard = next(iter(weight_map.items()))
    index.write_text(json.dumps({"weight_map": weight_map})[:-2] + f', "{name}": "{shard}"' + "}}")
    code, out, err = run_cli("ckpt", "import-hf", model, "--out", tmp_path / "out")
    assert code == 1, out + err
    assert str(index) in one_error_line(err) and f"key {name!r} appears twice" in err
    assert not (tmp_path / "out").exists()


ASSETS = ("generation_config.json", "tokenizer_config.json")


@pytest.mark.parametrize("name", ASSETS)
def test_export_refuses_an_asset_giving_a_key_twice(tmp_path, name):
    """Was: copied into the export as it was, for transformers to take the last value."""
    run = _mfsdp_run(tmp_path)
    asset = run / "global_step_2" / "huggingface" / name
    asset.write_text('{"eos_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}')
    code, out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 1, out + err  # as for an asset export cannot copy (a FIFO, a link out)
    line = one_error_line(err)
    assert str(asset) in line and "key 'eos_token_id' appears twice" in line
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("name", ("config.json", *ASSETS))
def test_training_refuses_a_model_file_giving_a_key_twice(tmp_path, trainable, name):
    """Was: transformers took the last value and trained on it."""
    source, table = trainable
    model = tmp_path / "model"
    shutil.copytree(source, model)
    key = _twice(model / name)
    code, err = train_from(model, table, tmp_path / "run")
    assert code == 2, err  # each is checked before launch, a usage error as config.json's
    one_error(err, str(model / name), f"key {key} appears twice")
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- library log lines
LIBRARY_LOGGERS = {
    "transformers": "from transformers.utils import logging as hf; "
    "hf.get_logger('transformers.models.auto').warning({forged!r})",
    "own-handler": "import logging; lib = logging.getLogger('lib'); "
    "lib.addHandler(logging.StreamHandler()); lib.propagate = False; "
    "lib.warning('%s', {forged!r})",
}


@pytest.mark.parametrize("case", list(LIBRARY_LOGGERS))
def test_library_log_lines_print_escaped(case):
    """Was: the library's own handler wrote the message raw to the terminal."""
    code = LIBRARY_LOGGERS[case].format(forged=FORGED)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from cli.verbosity import configure_logging; configure_logging(); {code}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    no_forged_lines(done.stderr)
    assert "/nonexist\\x0aerror: forged\\x1b[31m" in done.stderr, done.stderr
