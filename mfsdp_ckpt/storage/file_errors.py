"""An OSError that names the file it is about.

A write through a descriptor (`pwrite`, `fallocate`, `copy_file_range`, `fsync`) raises an
OSError with no file name: `[Errno 27] File too large`, which the command's error line
could only pin on its output directory as a whole. The writers that hold the path give it
back here, so the line reads `PATH: reason` for the very file (`cli.errors`).
"""

from __future__ import annotations

import os


def naming_file(err: OSError, path: str | os.PathLike[str]) -> OSError:
    """`err` naming `path`, where it names no file; one that names a file already, or has
    no errno (mfsdp's own errors, whose words say what they are about), is returned as is.
    The errno stays (and with it the subclass: ENOSPC's OSError, ENOENT's FileNotFoundError)."""
    if err.filename is not None or err.errno is None:
        return err
    return OSError(err.errno, err.strerror or str(err), os.fspath(path))
