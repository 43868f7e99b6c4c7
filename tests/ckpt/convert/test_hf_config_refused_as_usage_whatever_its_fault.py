"""`export-hf --hf-config DIR` whose config.json is refused exits 2 whatever is wrong with it
(a key given twice, a FIFO, a directory, a link out of the model dir), as a NaN in it or
nesting too deep always did and docs/interop.md says; the same fault in a step's own
huggingface/config.json is damage of the checkpoint, exit 1. A key given twice is said as
import-hf and validate say it: "not valid JSON (key 'x' appears twice)".

Was: a key given twice ("appears twice in one object") and a FIFO exited 1, so `--json`'s
exit_code sorted the argument as a damaged checkpoint."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.ckpt_edits import rehash
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES

RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"
TWICE = "not valid JSON (key 'num_hidden_layers' appears twice)"


def _key_twice(config: Path) -> str:
    text = config.read_text().rstrip()
    config.write_text(text[:-1] + ', "num_hidden_layers": 1}')
    return TWICE


def _fifo(config: Path) -> str:
    config.unlink()
    os.mkfifo(config)
    return "a FIFO, not a regular file"


def _directory(config: Path) -> str:
    config.unlink()
    config.mkdir()
    (config / "x").write_text("{}")
    return "not a regular file"


def _link_out(config: Path) -> str:
    outside = config.parent.parent / "elsewhere.json"
    shutil.move(config, outside)
    config.symlink_to(outside)
    return "outside"


FAULTS: dict[str, Callable[[Path], str]] = {
    "key_twice": _key_twice,
    "fifo": _fifo,
    "directory": _directory,
    "link_out": _link_out,
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_given_config_refused_is_usage(tmp_path, fault):
    given = shutil.copytree(RUN / "global_step_2" / "huggingface", tmp_path / "models" / "m")
    needle = FAULTS[fault](given / "config.json")
    out = tmp_path / "out"
    code, _out, err = run_cli("ckpt", "export-hf", RUN, "--hf-config", given, "--out", out)
    assert code == 2, err
    one_error(err, str(given / "config.json"), needle)
    assert not out.exists()


def test_the_steps_own_config_with_a_key_twice_is_damage(tmp_path):
    run = shutil.copytree(RUN, tmp_path / "run")
    step = run / "global_step_2"
    _key_twice(step / "huggingface" / "config.json")
    rehash(step, "huggingface/config.json")  # the manifest vouches for it: the JSON is the fault
    code, _out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    assert code == 1, err
    one_error(err, f"{step / 'huggingface' / 'config.json'}: {TWICE}")
