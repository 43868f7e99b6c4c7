"""`model.path=DIR` whose config.json is there but is no readable regular file inside DIR
(a FIFO, a /dev/zero link, a directory, a link out of the dir, a dangling or looping link,
one behind a folder this user cannot search) names that file and why, in the words
import-hf uses for it, exit 2.

Was: "DIR is neither a Hugging Face model dir (no config.json) nor a checkpoint (DIR: a
Hugging Face model dir, not a training checkpoint (to make one from it: mfsdp ckpt
import-hf DIR --out DIR))": a config.json that is there called missing, the dir called
both things, and the import-hf it advised then refused the same file.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.permissions import run_cli_denied
from tests.support.sft import TINY_CONFIG
from trainer.config import ConfigError, ModelConfig
from trainer.model_source import resolve_model_source
from trainer.tiny import build_tiny_model_dir


def _fifo(model: Path, _outside: Path) -> None:
    os.mkfifo(model / "config.json")


def _dev_zero(model: Path, _outside: Path) -> None:
    os.symlink("/dev/zero", model / "config.json")


def _directory(model: Path, _outside: Path) -> None:
    (model / "config.json").mkdir()


def _link_to_a_dir_outside(model: Path, outside: Path) -> None:
    os.symlink(outside, model / "config.json")


def _link_to_nothing(model: Path, _outside: Path) -> None:
    os.symlink("gone.json", model / "config.json")


def _link_to_itself(model: Path, _outside: Path) -> None:
    os.symlink("config.json", model / "config.json")


CASES: dict[str, Callable[[Path, Path], None]] = {
    "fifo": _fifo,
    "dev_zero": _dev_zero,
    "directory": _directory,
    "link_to_a_dir_outside": _link_to_a_dir_outside,
    "link_to_nothing": _link_to_nothing,
    "link_to_itself": _link_to_itself,
}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return build_tiny_model_dir(tmp_path_factory.mktemp("base") / "model", with_weights=True)


def _model_with(base: Path, root: Path, make: Callable[[Path, Path], None]) -> Path:
    """A copy of `base` under `root` whose config.json `make` replaces."""
    model = shutil.copytree(base, root / "model")
    (model / "config.json").unlink()
    outside = root / "elsewhere"
    outside.mkdir()
    make(model, outside)
    return model


def _import_hf_says(model: Path, out: Path) -> str:
    code, _out, err = run_cli("ckpt", "import-hf", model, "--out", out)
    assert code in (1, 2), err
    return one_error(err).removeprefix("error: ")


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_config_json_is_named_as_import_hf_names_it(base, tmp_path, case):
    model = _model_with(base, tmp_path, CASES[case])
    with pytest.raises(ConfigError) as refused:
        resolve_model_source(ModelConfig(path=str(model)))
    said = str(refused.value)
    assert said == f"model.path: {_import_hf_says(model, tmp_path / 'out')}"
    assert said.startswith(f"model.path: {model / 'config.json'}: "), said
    assert "no config.json" not in said and "import-hf" not in said, said


def test_train_sft_exits_2_with_that_one_line(base, tmp_path):
    model = _model_with(base, tmp_path, _fifo)
    code, _out, err = run_cli(
        *("train", "sft", "--config", TINY_CONFIG, f"model.path={model}"),
        f"trainer.run_dir={tmp_path / 'run'}",
    )
    assert code == 2, err
    one_error(err, f"model.path: {model / 'config.json'}: a FIFO, not a regular file")


def test_a_config_json_behind_a_folder_this_user_cannot_search(base, tmp_path):
    """config.json links to `sub/config.json` inside the model dir, `sub` of mode 000: the
    link cannot be followed, and train says so as import-hf does."""
    model = shutil.copytree(base, tmp_path / "model")
    (model / "sub").mkdir()
    (model / "config.json").rename(model / "sub" / "config.json")
    os.symlink("sub/config.json", model / "config.json")
    train, imported = run_cli_denied(
        [
            ["train", "sft", "--config", str(TINY_CONFIG), f"model.path={model}"],
            ["ckpt", "import-hf", str(model), "--out", str(tmp_path / "out")],
        ],
        unreadable=model / "sub",
    )
    assert train["escaped"] is None and train["exit"] == 2, train
    said = one_error(imported["stderr"], "Permission denied").removeprefix("error: ")
    assert one_error(train["stderr"]) == f"error: model.path: {said}"
