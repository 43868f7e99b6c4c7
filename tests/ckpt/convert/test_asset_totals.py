"""A checkpoint's own huggingface/ is copied whole by export, as its trainer wrote it, but
bounded: more files or bytes than a model's config and tokenizer files come to are refused in
one line naming the dir, before anything is copied; validate lists the first few files its
manifest does not know and counts the rest.

Was: 20,000 empty junk files made validate print 20,001 lines and export copy every one;
six sparse 500 MB files made export write 3 GB."""

from __future__ import annotations

import shutil
from pathlib import Path

from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.convert.export_source import MAX_ASSET_FILES, MAX_ASSETS_BYTES
from mfsdp_ckpt.storage.chunk_checks import MAX_LISTED_PROBLEMS
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES


def _run(root: Path) -> tuple[Path, Path]:
    """A copy of the mfsdp fixture run and its huggingface/ dir."""
    run = shutil.copytree(FIXTURES / "megatron_fsdp_qwen2" / "run", root / "run")
    return run, run / "global_step_2" / "huggingface"


def _junk(hf: Path, count: int) -> None:
    for index in range(count):
        (hf / f"junk{index}.txt").touch()


def test_export_refuses_more_files_than_a_models_assets_in_one_line(tmp_path):
    run, hf = _run(tmp_path)
    _junk(hf, MAX_ASSET_FILES)  # with config.json, one more than the bound
    for source in (run, f"file://{run}"):
        code, _out, err = run_cli("ckpt", "export-hf", source, "--out", tmp_path / "out")
        assert code == 1, err
        one_error(err, "huggingface: ", f"more than the {MAX_ASSET_FILES}")
        assert not (tmp_path / "out").exists()


def test_export_refuses_more_bytes_than_a_models_assets_in_one_line(tmp_path):
    run, hf = _run(tmp_path)
    for index in range(3):  # sparse: nothing is written, each under the bound of one asset
        with open(hf / f"junk{index}.dat", "wb") as handle:
            handle.truncate(MAX_ASSETS_BYTES // 2)
    code, _out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    assert code == 1, err
    one_error(err, f"{hf}: its files besides the weights hold", f"more than the {MAX_ASSETS_BYTES}")
    assert not (tmp_path / "out").exists()


def test_a_few_extra_files_are_still_copied(tmp_path):
    run, hf = _run(tmp_path)
    _junk(hf, 3)
    code, _out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    assert code == 0, err
    assert (tmp_path / "out" / "junk2.txt").is_file()


def test_validate_lists_the_first_unknown_files_and_counts_the_rest(tmp_path):
    run, hf = _run(tmp_path)
    _junk(hf, MAX_LISTED_PROBLEMS + 30)
    findings = validate_checkpoint(run).findings
    unknown = [f for f in findings if f.message == "not listed in the manifest (unknown file)"]
    assert len(unknown) == MAX_LISTED_PROBLEMS
    more = [f for f in findings if f.message.startswith("(+")]
    assert [(f.severity, f.where, f.message) for f in more] == [
        ("warning", str(hf.parent), "(+30 more files not listed in the manifest)")
    ]
    code, out, err = run_cli("ckpt", "validate", run)
    assert code == 0 and len(out.splitlines()) == MAX_LISTED_PROBLEMS + 2, out + err
