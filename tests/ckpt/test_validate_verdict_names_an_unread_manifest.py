"""A step whose manifest.json is there but cannot be read (damaged JSON, a directory or FIFO
in its place, denied, written by a newer mfsdp), as a run's `global_step_N` or copied under
a name that is no step's (`best/`): validate's error line names the file and why, and the
verdict says the hashes were not checked and why. It said nothing of the hashes where the
step was ours, and "no manifest, so file hashes were not checked" where the copy was read as
a bare dist_ckpt. The exit status follows the verdict: INVALID, 1, as the error makes it."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.checkpointer import Checkpointer
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.manifest_digest import DIGEST_FIELD, sealed
from tests.support.permissions import run_cli_denied

STEP = 2


def _bad_json(manifest: Path) -> None:
    """Damage that breaks the JSON, as a flipped byte does; the fields' names stay."""
    manifest.write_text(manifest.read_text().replace("{", "{bad", 1))


def _directory(manifest: Path) -> None:
    manifest.unlink()
    manifest.mkdir()


def _fifo(manifest: Path) -> None:
    manifest.unlink()
    os.mkfifo(manifest)


def _newer(manifest: Path) -> None:
    data = json.loads(manifest.read_text())
    data["format_version"] += 1
    manifest.write_text(json.dumps(sealed({k: v for k, v in data.items() if k != DIGEST_FIELD})))


# each damage, and the reason the verdict gives for it
UNREAD: dict[str, tuple[Callable[[Path], None], str]] = {
    "bad json": (_bad_json, "not valid JSON (Expecting property name enclosed in double quotes"),
    "directory": (_directory, "a directory, not a regular file"),
    "fifo": (_fifo, "a FIFO, not a regular file"),
    "newer": (_newer, "written by a newer mfsdp (format_version 3"),
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("unread")
    states = {"model": {"w": torch.randn(16, 8)}, "extra": {"step": STEP}}
    Checkpointer(root, strategy="none", io_threads=2).save(
        STEP, states, contents=("model", "extra")
    )
    return layout.step_dir(root, STEP)


PLACES = ("global_step_N", "best/")


def _placed(saved: Path, tmp_path: Path, place: str) -> Path:
    """A copy of the saved step, as a run's step (the run dir returned) or as `best/`; its
    manifest's path is the step's and `best/`'s alike."""
    if place == "best/":
        return Path(shutil.copytree(saved, tmp_path / "best"))
    shutil.copytree(saved.parent, tmp_path / "run")
    return tmp_path / "run"


def _manifest(given: Path) -> Path:
    return (given if given.name == "best" else layout.step_dir(given, STEP)) / layout.MANIFEST_FILE


def _check(code: int, stdout: str, manifest: Path, reason: str | None) -> None:
    """An error line naming `manifest`, and a verdict, INVALID with exit 1, saying its hashes
    were not checked because it cannot be read (`reason`: how the why starts)."""
    assert code == 1, stdout
    *lines, verdict = stdout.splitlines()
    assert any(line.startswith(f"error: {manifest}: ") for line in lines), stdout
    assert verdict.startswith("INVALID: ") and "no manifest" not in verdict, verdict
    assert verdict.endswith("so file hashes were not checked)"), verdict
    assert f"; manifest.json unreadable ({reason or ''}" in verdict, verdict


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("case", sorted(UNREAD))
def test_the_verdict_says_the_manifest_is_unreadable_and_why(saved, tmp_path, case, place):
    damage, reason = UNREAD[case]
    given = _placed(saved, tmp_path, place)
    damage(_manifest(given))
    for extra in ([], ["--strict"], ["--deep"]):
        result = CliRunner().invoke(app, ["ckpt", "validate", str(given), *extra])
        _check(result.exit_code, result.stdout, _manifest(given), reason)


@pytest.mark.parametrize("place", PLACES)
def test_a_denied_manifest_is_named_unreadable(saved, tmp_path, place):
    given = _placed(saved, tmp_path, place)
    (record,) = run_cli_denied([["ckpt", "validate", str(given)]], unreadable=_manifest(given))
    assert record["escaped"] is None, record
    _check(record["exit"], record["stdout"], _manifest(given), None)


def test_a_readable_manifest_and_none_say_what_they_did(saved, tmp_path):
    best = _placed(saved, tmp_path, "best/")
    result = CliRunner().invoke(app, ["ckpt", "validate", str(best), "--deep"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1].endswith(", deep, xxh3_128 checked)"), result.stdout
    _manifest(best).unlink()
    result = CliRunner().invoke(app, ["ckpt", "validate", str(best)])
    assert result.exit_code == 0, result.output
    verdict = result.stdout.splitlines()[-1]
    assert verdict.endswith("; no manifest, so file hashes were not checked)"), verdict
