"""An OSError reaching the error line reads `PATH: reason`, with the full path of the file
involved and without Python's `[Errno N]` prefix; the writers give that path.

Was (with `ulimit -f`): `error: [Errno 27] /.../out/model.safetensors: cannot reserve ...
(File too large)` from export-hf, and `error: [Errno 27] File too large: '/.../out'` from
import-hf, which named only the output directory."""

from __future__ import annotations

import errno
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mfsdp_ckpt.format.dtypes import BY_NAME
from mfsdp_ckpt.storage.safetensors_writer import ShardedSafetensorsWriter
from tests.support.cli_errors import group_raising
from tests.support.hf_model_files import saved_hf_model
from tests.support.paths import REPO, repo_env

FILE_LIMIT = 4096  # bytes: above every small file the commands write, below the weights


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (OSError(errno.EFBIG, "File too large", "/o/x.distcp"), "/o/x.distcp: File too large"),
        (PermissionError(errno.EACCES, "Permission denied", "/a", None, "/b"), "/a -> /b: Perm"),
        (OSError(errno.EIO, "/o/x: write failed (Input/output error)"), "/o/x: write failed"),
    ],
)
def test_the_line_is_the_path_and_the_reason(error, line):
    result = CliRunner().invoke(group_raising(error), ["go"])
    assert result.exit_code == 1
    shown = result.stderr.strip()
    assert shown.startswith(f"error: {line}") and "Errno" not in shown, shown


def _mfsdp(*args: object, limited: bool = True) -> tuple[int, str]:
    """Exit status and stderr of `mfsdp ARGS`, with files limited to FILE_LIMIT bytes."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))

    done = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**repo_env(), "OMP_NUM_THREADS": "1"},
        cwd=REPO,
        preexec_fn=limit if limited else None,
    )
    return done.returncode, done.stderr


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return saved_hf_model(tmp_path_factory.mktemp("hf"), "qwen2", tied=False)


@pytest.mark.parametrize(
    ("layout", "written"),
    [("mcore", "__0_"), ("hf", "global_step_0/dist_ckpt/__0_")],
)
def test_import_names_the_data_file_it_could_not_write(tmp_path, model, layout, written):
    out = tmp_path / "imported"
    code, err = _mfsdp("ckpt", "import-hf", model, "--out", out, "--layout", layout)
    assert code == 1, err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"error: {out}/{written}"), err
    assert line.endswith(".distcp: File too large"), err
    assert "Errno" not in err


def test_export_names_the_file_it_could_not_reserve(tmp_path, model):
    imported = tmp_path / "imported"
    code, err = _mfsdp(
        "ckpt", "import-hf", model, "--out", imported, "--layout", "hf", limited=False
    )
    assert code == 0, err
    out = tmp_path / "exported"
    code, err = _mfsdp("ckpt", "export-hf", imported, "--out", out)
    assert code == 1, err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"error: {out}/model.safetensors: cannot reserve "), err
    assert line.endswith("(File too large)") and "Errno" not in err, err


def test_a_kernel_copy_that_fails_names_the_file(tmp_path, monkeypatch):
    writer = ShardedSafetensorsWriter(tmp_path, [("w", BY_NAME["float32"], (4,))], 1 << 30)
    writer.open()
    source = tmp_path / "source"
    source.write_bytes(bytes(16))

    def too_large(*_args: object) -> int:
        raise OSError(errno.EFBIG, "File too large")

    monkeypatch.setattr("os.copy_file_range", too_large)
    with open(source, "rb") as handle, pytest.raises(OSError) as caught:
        writer.copy_range("w", handle.fileno(), 0, 0, 16, done=True)
    writer.abort()
    assert (caught.value.errno, caught.value.filename) == (
        errno.EFBIG,
        str(tmp_path / "model.safetensors"),
    )
