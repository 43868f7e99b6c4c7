"""`--overwrite` onto an earlier export this user cannot delete (made read-only): refused
before any work, naming the directory; and one that still cannot be deleted once swapped
out (its permissions changed meanwhile) is a warning naming it, the command a success, and
every later command into the same --out removes it or names it again.

Was: the new export published, then `error: [Errno 13] Permission denied: 'tokenizer.json'`
with exit 1, and the old export left hidden at `.DIR.export-tmp-<pid>` for good (the next
export exited 0 and left it, silently). The commands run as a user whom mode 555 denies
(root's overrides dropped: `tests.support.permissions`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.export_marks import marked_weights
from tests.support.paths import REPO, repo_env
from tests.support.permissions import without_root_overrides

# Claims `out` with --overwrite and publishes a new export there; with "race", the up-front
# check is skipped, as when permissions change between it and the swap.
_EXPORT = r"""
import json, sys
from pathlib import Path
from mfsdp_ckpt.storage import out_dir
from tests.support.export_marks import marked_weights
mode, out = sys.argv[1], Path(sys.argv[2])
if mode == "race":
    out_dir.unremovable_dir = lambda root: None
try:
    with out_dir.claim_output(out, overwrite=True, writes=["adapter"]) as claim:
        (claim.tmp / "config.json").write_text("{}")
        marked_weights(claim.tmp, "new")
        claim.publish()
    print(json.dumps({"error": None}))
except out_dir.OutputDirError as err:
    print(json.dumps({"error": str(err)}))
"""


def _export(out: Path, mode: str = "checked") -> tuple[str | None, list[str]]:
    """The refusal (None: published) and the stderr lines of one export into `out`."""
    done = subprocess.run(
        [*without_root_overrides(), sys.executable, "-c", _EXPORT, mode, str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        env=repo_env(),
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)["error"], done.stderr.splitlines()


def _tensor_of(out: Path) -> str:
    """The one tensor's name in the export at `out` (`marked_weights`): which export it is."""
    from safetensors import safe_open

    with safe_open(out / "model.safetensors", "pt") as weights:
        (name,) = weights.keys()
    return name


def _earlier_export(out: Path) -> Path:
    out.mkdir()
    (out / "config.json").write_text("{}")
    marked_weights(out, "old")
    (out / "tokenizer.json").write_text("{}")
    (out / "adapter").mkdir()
    (out / "adapter" / "adapter_config.json").write_text("{}")
    return out


def test_a_read_only_earlier_export_is_refused_before_any_work(tmp_path):
    out = _earlier_export(tmp_path / "ex2")
    out.chmod(0o555)
    try:
        error, lines = _export(out)
    finally:
        out.chmod(0o755)
    assert error is not None and error.startswith(f"{out}: --overwrite cannot delete it"), error
    assert f"chmod u+rwx {out})" in error and "nothing was written" in error, error
    assert lines == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ex2"]  # no work dir, no lock
    assert _tensor_of(out) == "old"


def test_a_read_only_folder_inside_it_is_named(tmp_path):
    out = _earlier_export(tmp_path / "ex2")
    (out / "adapter").chmod(0o555)
    try:
        error, _ = _export(out)
    finally:
        (out / "adapter").chmod(0o755)
    assert error is not None and f"chmod u+rwx {out / 'adapter'})" in error, error
    assert _tensor_of(out) == "old"


def test_one_that_cannot_be_deleted_once_replaced_is_a_warning_until_removed(tmp_path):
    out = _earlier_export(tmp_path / "ex2")
    out.chmod(0o555)  # after the check: the race
    try:
        error, lines = _export(out, "race")
        assert error is None
        assert _tensor_of(out) == "new"
        left = [p for p in tmp_path.iterdir() if p.name != "ex2"]
        assert len(left) == 1 and left[0].name.startswith(".ex2.export-tmp-"), left
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"warning: {left[0]}: the earlier ex2 this command replaced"), (
            lines
        )
        assert "Permission denied" in lines[0] and f"{left[0]}/" in lines[0], lines  # full path

        error, lines = _export(out)  # a later export says it is still there
        assert error is None
        assert len(lines) == 1 and lines[0].startswith(f"warning: {left[0]}: left by an"), lines
        assert left[0].exists()
    finally:
        for path in tmp_path.glob(".ex2.export-tmp-*"):
            path.chmod(0o755)
    error, lines = _export(out)  # and removes it once it can
    assert (error, lines) == (None, [])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ex2"]
