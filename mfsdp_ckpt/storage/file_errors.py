"""An OSError that names the file it is about.

A write through a descriptor (`pwrite`, `fallocate`, `copy_file_range`, `fsync`) raises an
OSError with no file name: `[Errno 27] File too large`, which the command's error line
could only pin on its output directory as a whole. The writers that hold the path give it
back here, so the line reads `PATH: reason` for the very file (`cli.errors`).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

# Errnos that say what the machine or the process lacked, whichever file the call was
# writing: memory (ENOMEM, ENOBUFS), a resource to try again for (EAGAIN), a signal
# (EINTR), open files (EMFILE the process's limit, ENFILE the system's: a file does not hold
# the others open). Named, `PATH: Cannot allocate memory` blamed the file, and the
# out-of-memory line (`cli.errors`) quoted it as the cause.
NOT_ABOUT_THE_FILE = frozenset(
    {errno.ENOMEM, errno.ENOBUFS, errno.EAGAIN, errno.EINTR, errno.EMFILE, errno.ENFILE}
)


def naming_file(err: OSError, path: str | os.PathLike[str]) -> OSError:
    """`err` naming `path`, where it names no file; one that names a file already, has no
    errno (mfsdp's own errors, whose words say what they are about) or an errno
    NOT_ABOUT_THE_FILE, is returned as is. The errno stays (and with it the subclass:
    ENOSPC's OSError, ENOENT's FileNotFoundError)."""
    if err.filename is not None or err.errno is None or err.errno in NOT_ABOUT_THE_FILE:
        return err
    return OSError(err.errno, err.strerror or str(err), os.fspath(path))


def os_error_line(err: OSError) -> str:
    """`PATH: reason` for an OSError: the file it names (both, for a rename) and errno's
    words, without Python's `[Errno N]` prefix and quotes (`[Errno 27] File too large:
    '/x'`). One that names no file is its words alone: mfsdp's writers put the path there
    (`PATH: cannot reserve ...`) or give it as the file name (`naming_file`)."""
    reason = err.strerror or str(err)
    if err.filename is None:
        return reason
    names = [
        os.fsdecode(name) if isinstance(name, str | bytes) else str(name)
        for name in (err.filename, err.filename2)
        if name is not None
    ]
    return f"{' -> '.join(names)}: {reason}"


def in_work_dir(err: OSError, work: Path) -> OSError:
    """`err`, naming a file in the work dir `work`, said as what failed: the file by its
    name in the output, and that nothing of the output was kept. It names no file itself:
    `out_dir.OutputClaim` puts the output's path in front. Said at that path
    (`OUT/model.safetensors: File too large`) it named a file that never existed, since the
    output is made only once whole; the work dir's own name would be one removed by the
    time it is read. Any other error (no file in `work`, no errno, NOT_ABOUT_THE_FILE, a
    descriptor for a name) is returned as is; the errno stays."""
    if err.errno is None or err.errno in NOT_ABOUT_THE_FILE:
        return err
    if not isinstance(err.filename, str | bytes | os.PathLike):  # none, or a descriptor
        return err
    path = Path(os.fsdecode(err.filename))
    if work not in path.parents:
        return err
    return OSError(
        err.errno,
        f"writing {path.relative_to(work)} failed ({err.strerror or os.strerror(err.errno)});"
        " nothing of the output was kept",
    )
