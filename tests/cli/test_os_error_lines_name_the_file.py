"""An OSError reaching the error line reads `PATH: reason`, with the full path of the file
involved and without Python's `[Errno N]` prefix; the writers give that path.

Was (with `ulimit -f`): `error: [Errno 27] /.../out/model.safetensors: cannot reserve ...
(File too large)` from export-hf, and `error: [Errno 27] File too large: '/.../out'` from
import-hf, which named only the output directory. What export-hf and import-hf say for a
write that fails in their hidden work dir is tested in `test_failed_writes_name_the_work_dir`."""

from __future__ import annotations

import errno

import pytest
from click.testing import CliRunner

from mfsdp_ckpt.format.dtypes import BY_NAME
from mfsdp_ckpt.storage.safetensors_writer import ShardedSafetensorsWriter
from tests.support.cli_errors import group_raising


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
