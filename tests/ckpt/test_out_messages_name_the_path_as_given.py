"""An `--out` error names the path as the user gave it, relative where it was (README:
"relative where the path given was"): `--out hfx` over an existing one said
`/abs/cwd/hfx: already exists`, and a parent that is a file was named by its absolute path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mfsdp_ckpt.storage.out_dir import OutputDirError, as_given, claim_output
from tests.support.paths import FIXTURES, repo_env

FSDP_RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"


@pytest.mark.parametrize(
    ("given", "make", "said"),
    [
        ("hf", "hf/", "hf: already exists (pass --overwrite to replace it)"),
        ("out/hf", "out/hf/", "out/hf: already exists (pass --overwrite to replace it)"),
        ("./hf", "hf", "hf: exists and is not a directory"),
        ("a/b/c", "a", "a/b/c: a is a file, not a directory"),
        ("a/b/c", "a/b", "a/b/c: a/b is a file, not a directory"),
    ],
)
def test_a_relative_out_is_named_as_given(tmp_path, monkeypatch, given, make, said):
    monkeypatch.chdir(tmp_path)
    made = tmp_path / make.rstrip("/")
    made.parent.mkdir(parents=True, exist_ok=True)
    if make.endswith("/"):
        made.mkdir()
    else:
        made.write_text("x")
    with pytest.raises(OutputDirError) as refused:
        claim_output(given)
    assert str(refused.value) == said


def test_an_absolute_out_stays_absolute(tmp_path):
    (tmp_path / "hf").mkdir()
    with pytest.raises(OutputDirError, match=f"^{tmp_path}/hf: already exists"):
        claim_output(tmp_path / "hf")


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/w/hf", "hf"),
        ("/w/hf/model.safetensors", "hf/model.safetensors"),
        ("/w/.hf.export-tmp-7", ".hf.export-tmp-7"),
        ("/elsewhere/x", "/elsewhere/x"),  # beyond what `hf` reaches: as it is
    ],
)
def test_paths_about_the_output_are_said_from_the_given_one(path, said):
    assert as_given(Path(path), Path("/w/hf"), Path("hf")) == Path(said)


def test_export_hf_json_names_the_existing_out_as_given(tmp_path):
    (tmp_path / "hfx").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "cli.main"]
        + ["ckpt", "export-hf", str(FSDP_RUN), "--out", "hfx", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=repo_env(),
        timeout=120,
    )
    told = "hfx: already exists (pass --overwrite to replace it)"
    assert json.loads(done.stdout) == {"error": told, "exit_code": 2}
    assert done.stderr == f"error: {told}\n"
