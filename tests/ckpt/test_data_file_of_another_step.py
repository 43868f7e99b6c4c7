"""A step whose data file was replaced by the same-named file of another save (DCP names
them `__R_T.distcp` in every step; for one model and world size their layouts match).

Was: every torch.save record of such a file passes its own CRC, so a plain `export-hf`
exported the other save's weights with exit 0, and a run started from the step
(`model.path=STEP`) trained from them, while `validate --deep`, `--verify` and a resume
of the same step refused it (the manifest's per-file digest). Now a save records each
model record's CRC in its manifest (`model_records`), which the export compares with each
record it reads, and a run started from a step checks the step as a resume does. A
manifest written before records none: the export reads it as before.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.checkpointer import load_checkpoint
from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from mfsdp_ckpt.format.manifest import ManifestError, read_manifest
from tests.support.ckpt_edits import edit_manifest
from tests.support.export import save_single_process_checkpoint

DATA_FILE = f"{layout.DIST_CKPT_DIR}/__0_0.distcp"


@pytest.fixture(scope="module")
def saves(tmp_path_factory) -> tuple[Path, Path]:
    """(a step, the step of another save of the same model with other weights)."""
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("another_step")
    assets = build_tiny_model_dir(root / "assets")
    for name, seed in (("run", 1), ("other", 2)):
        save_single_process_checkpoint(root / name, assets, seed=seed)
    return root / "run" / "global_step_1", root / "other" / "global_step_1"


def _mixed(saves: tuple[Path, Path], root: Path, recorded: bool = True) -> Path:
    """A copy of the step whose data files, of its one rank, are the other save's (same
    names and sizes, every record's own CRC valid, a tied head's copies in agreement: only
    the manifest can tell); without the manifest's `model_records` (as written before)
    unless `recorded`."""
    step = Path(shutil.copytree(saves[0], root / "global_step_1"))
    for data in (step / layout.DIST_CKPT_DIR).glob("*.distcp"):
        other = saves[1] / layout.DIST_CKPT_DIR / data.name
        assert other.stat().st_size == data.stat().st_size
        shutil.copy2(other, data)
    if not recorded:
        edit_manifest(step, lambda data: data.pop("model_records"))
    return step


def _cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


def test_the_manifest_records_the_crc_of_each_model_record(saves):
    records = read_manifest(saves[0] / layout.MANIFEST_FILE).model_records
    assert records is not None and DATA_FILE in records
    other = read_manifest(saves[1] / layout.MANIFEST_FILE).model_records
    assert other is not None and records[DATA_FILE] != other[DATA_FILE]


def test_export_refuses_a_data_file_of_another_step(saves, tmp_path):
    step = _mixed(saves, tmp_path)
    code, said = _cli("ckpt", "export-hf", step, "--out", tmp_path / "hf")
    assert code == 1, said
    lines = said.strip().splitlines()
    assert len(lines) == 1, said
    assert re.match(rf"error: {re.escape(str(step))}/dist_ckpt/__0_\d+\.distcp \[model\.", said)
    assert "manifest.json records" in lines[0]
    assert not (tmp_path / "hf").exists()


def test_export_of_the_intact_step_passes(saves, tmp_path):
    code, said = _cli("ckpt", "export-hf", saves[0], "--out", tmp_path / "hf")
    assert code == 0, said
    assert (tmp_path / "hf" / "config.json").is_file()


def test_a_manifest_written_before_exports_as_before(saves, tmp_path):
    step = _mixed(saves, tmp_path, recorded=False)
    code, said = _cli("ckpt", "export-hf", step, "--out", tmp_path / "hf")
    assert code == 0, said  # nothing recorded to compare with: today's export
    assert "not the record" not in said


@pytest.mark.parametrize("recorded", [True, False])
def test_validate_and_resume_read_manifests_with_and_without_records(saves, tmp_path, recorded):
    step = Path(shutil.copytree(saves[0], tmp_path / "global_step_1"))
    if not recorded:
        edit_manifest(step, lambda data: data.pop("model_records"))
    code, said = _cli("ckpt", "validate", step, "--deep")
    assert code == 0, said
    extra: dict = {"step": 0}
    load_checkpoint(resolve_checkpoint(step), {"extra": extra}, contents=("extra",))
    assert extra["step"] == 1


def test_malformed_records_are_a_damaged_manifest(saves, tmp_path):
    step = Path(shutil.copytree(saves[0], tmp_path / "global_step_1"))
    edit_manifest(step, lambda data: data["model_records"][DATA_FILE].update({"x": 1}))
    with pytest.raises(ManifestError, match="field 'model_records' holds for"):
        read_manifest(step / layout.MANIFEST_FILE)


def test_a_run_from_the_step_refuses_it_as_a_resume_does(saves, tmp_path):
    from trainer.config import ModelConfig
    from trainer.model import build_hf_config, build_model, load_tokenizer

    step = _mixed(saves, tmp_path)
    cfg = ModelConfig(path=str(step))
    with pytest.raises(MfsdpFailedError, match=r"__0_\d+\.distcp: xxh3_128 differs"):
        build_model(cfg, build_hf_config(cfg, load_tokenizer(cfg)), torch.device("cpu"), 0)
