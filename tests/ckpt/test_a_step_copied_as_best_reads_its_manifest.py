"""A step of ours copied under a name that is no step's (`best/`, `ck/`) is ours whatever it
is called: the manifest.json beside its dist_ckpt/ is read by the rule of a `global_step_N`
in every reader, given the dir or its dist_ckpt/. One that cannot be read (damaged, bad
JSON, a directory in its place, written by a newer mfsdp) was a note, exit 0: the step read
as a bare dist_ckpt, so validate --deep passed flipped tensor bytes, export-hf exported and
a resume trained. Each now refuses it in one line naming the file, exit 1; a newer mfsdp's
says to upgrade."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.errors import MfsdpFailedError
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.manifest_digest import DIGEST_FIELD, sealed
from tests.support.export import save_single_process_checkpoint
from tests.support.interop_layouts import one_error_line, run_cli
from trainer.tiny import build_tiny_model_dir

STEP = 1


def _edited(edit: Callable[[dict], None], reseal: bool) -> Callable[[Path], None]:
    def damage(manifest: Path) -> None:
        data = json.loads(manifest.read_text())
        edit(data)
        if reseal:
            data = sealed({k: v for k, v in data.items() if k != DIGEST_FIELD})
        manifest.write_text(json.dumps(data))

    return damage


def _newer(data: dict) -> None:
    data["format_version"] += 1


def _other_step(data: dict) -> None:
    data["step"] = 7


def _bad_json(manifest: Path) -> None:
    """Damage that breaks the JSON, as a flipped byte does; the fields' names stay."""
    manifest.write_text(manifest.read_text().replace("{", "{bad", 1))


def _directory(manifest: Path) -> None:
    manifest.unlink()
    manifest.mkdir()


# each damage, and what the error line says of the manifest after its path
UNREAD: dict[str, tuple[Callable[[Path], None], str]] = {
    "newer": (
        _edited(_newer, reseal=True),
        "written by a newer mfsdp (format_version 3; this one reads up to 2): upgrade mfsdp",
    ),
    "edited": (_edited(_other_step, reseal=False), f"its fields differ from its {DIGEST_FIELD}"),
    "bad json": (_bad_json, "not valid JSON"),
    "directory": (_directory, "a directory, not a regular file"),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A step of the tiny model with its huggingface/ (export-hf reads it)."""
    root = tmp_path_factory.mktemp("best")
    save_single_process_checkpoint(root / "run", build_tiny_model_dir(root / "assets"))
    return layout.step_dir(root / "run", STEP)


def _best(saved: Path, tmp_path: Path, name: str = "best") -> Path:
    return Path(shutil.copytree(saved, tmp_path / name))


def _refused(args: list, manifest: Path, reason: str) -> None:
    code, stdout, stderr = run_cli(*args)
    assert code == 1, stdout + stderr
    line = one_error_line(stdout + stderr)
    assert line.startswith(f"error: {manifest}: {reason}"), line


@pytest.mark.parametrize("case", sorted(UNREAD))
@pytest.mark.parametrize("given", ["best", "best/dist_ckpt"])
def test_every_reader_refuses_an_unreadable_manifest_of_a_step_named_best(
    saved, tmp_path, case, given
):
    damage, reason = UNREAD[case]
    best = _best(saved, tmp_path)
    manifest = best / layout.MANIFEST_FILE
    damage(manifest)
    path = tmp_path / given
    for args in (
        ["ckpt", "validate", path],
        ["ckpt", "validate", path, "--deep"],
        ["ckpt", "inspect", path],
        ["ckpt", "export-hf", path, "--out", tmp_path / "hf"],
    ):
        _refused(args, manifest, reason)
    assert not (tmp_path / "hf").exists()
    checkpointer = Checkpointer(tmp_path / "resumed", strategy="none")
    found = checkpointer.find_resume(str(path))
    assert found is not None and found.manifest == manifest
    with pytest.raises(MfsdpFailedError) as refused:
        checkpointer.load(found, {"extra": {"step": 0}}, contents=("extra",))
    assert str(refused.value).startswith(f"{manifest}: {reason}"), refused.value


def _flip_a_tensor_byte(step: Path) -> Path:
    data = step / layout.DIST_CKPT_DIR / "__0_0.distcp"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    data.write_bytes(bytes(raw))
    return data


def test_flipped_tensor_bytes_under_a_damaged_manifest_are_not_valid(saved, tmp_path):
    ck = _best(saved, tmp_path, "ck")
    data = _flip_a_tensor_byte(ck)
    code, stdout, stderr = run_cli("ckpt", "validate", ck, "--deep")
    assert code == 1 and f"error: {data}: " in stdout + stderr, stdout + stderr
    _edited(_other_step, reseal=False)(ck / layout.MANIFEST_FILE)
    _refused(["ckpt", "validate", ck, "--deep"], ck / layout.MANIFEST_FILE, UNREAD["edited"][1])


def test_a_readable_manifest_of_a_step_named_best_reads_as_its_step(saved, tmp_path):
    best = _best(saved, tmp_path)
    code, stdout, stderr = run_cli("ckpt", "validate", best, "--deep")
    assert code == 0, stdout + stderr
    assert "error:" not in stdout + stderr and "note:" not in stdout + stderr, stdout + stderr
    found = Checkpointer(tmp_path / "resumed", strategy="none").find_resume(str(best))
    assert found is not None and (found.kind, found.step) == (layout.MFSDP, STEP)
