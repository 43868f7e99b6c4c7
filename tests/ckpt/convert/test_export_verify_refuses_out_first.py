"""export-hf --verify refuses an --out it may not write first, as it does without --verify:
its config check imports transformers (seconds) and ran before --out was looked at, so an
--out that was already there cost that wait, and with a config transformers refuses the
user was sent to fix the config, only to be refused for --out next."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from cli.main import app
from tests.support.ckpt_edits import rehash
from tests.support.export import save_single_process_checkpoint


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("verify_out")
    save_single_process_checkpoint(root / "run", build_tiny_model_dir(root / "assets"))
    return root / "run"


def _unloadable_copy(run_dir, tmp_path):
    """A copy of the run whose step's own config.json transformers refuses, the manifest
    agreeing: only the planted value is wrong."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    config_file = copy / "global_step_1" / "huggingface" / "config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "rms_norm_eps": "1e-6"}))
    rehash(copy / "global_step_1", "huggingface/config.json")
    return copy


@pytest.mark.parametrize(
    "flags, says",
    [([], "already exists (pass --overwrite"), (["--overwrite"], "not a model export")],
    ids=["exists", "overwrite_refused"],
)
def test_an_out_refused_is_said_before_the_config_check(run_dir, tmp_path, flags, says):
    copy = _unloadable_copy(run_dir, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("someone's data")
    args = ["ckpt", "export-hf", str(copy), "--out", str(out), *flags]
    without = CliRunner().invoke(app, args)
    verified = CliRunner().invoke(app, [*args, "--verify"])
    assert verified.exit_code == without.exit_code == 2, verified.output
    assert verified.output == without.output, (verified.output, without.output)
    assert verified.output.startswith(f"error: {out}: "), verified.output
    assert says in verified.output and "transformers" not in verified.output, verified.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "run"]
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_a_free_out_still_gets_the_config_check_and_nothing_is_left(run_dir, tmp_path):
    copy = _unloadable_copy(run_dir, tmp_path)
    out = tmp_path / "new" / "parents" / "x"
    result = CliRunner().invoke(
        app, ["ckpt", "export-hf", str(copy), "--out", str(out), "--verify"]
    )
    assert result.exit_code == 1, result.output
    assert "transformers cannot load it (Field 'rms_norm_eps'" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # parents made, then removed
