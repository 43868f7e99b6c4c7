"""Open files that a checkpoint names without trusting what they are or where they lead.

A checkpoint directory is user data that may be damaged or crafted. Every small file the
tools read (tracker, manifest, config.json, tokenizer files, DCP `.metadata`) goes through
here so that three rules hold in one place:

* only regular files are read: a FIFO, a device (`/dev/zero`) or a directory where a file
  is expected is refused before it is opened, since reading one can hang or never end;
* nothing outside the checkpoint is read: a path (or a symlink on it) that resolves
  outside `root` is refused, so a crafted link cannot copy a user's files into an export
  (for a Hugging Face model dir, `model_dir_root` says where its files may lead, and a
  link to a blob of the Hugging Face cache is read as the model's own file: `hf_cache`);
* reads are bounded: a file larger than the caller's limit is refused, not read whole.

Errors are `CheckpointFileError` with one line that names the path.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from mfsdp_ckpt.storage import hf_cache
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from mfsdp_ckpt.storage.confined_stat import LeadsOutError, confined_stat

_KIND_NAMES = {
    stat.S_IFREG: "a regular file",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symlink",
}


def kind_name(mode: int) -> str:
    """What a file of `mode` (from `os.stat`) is, in words: "a FIFO", "a character device".
    Every refusal of something that is no regular file (or no directory) starts with it, so
    that a manifest, a tracker, --hf-config or a model dir is said to be the same thing
    whichever command met it."""
    return _KIND_NAMES.get(stat.S_IFMT(mode), "not a regular file")


class ModelDirRoot(str):
    """The root of a Hugging Face model dir (`model_dir_root`), the user's own files: a
    link in it may also lead to a blob of the Hugging Face cache (a `--local-dir` download
    links each file there), and a link refused names where it leads (the link's text, in
    the user's own folder), which a checkpoint being inspected does not. A `str`, so that
    every reader taking a root takes it unchanged."""


def resolve_inside(
    path: str | os.PathLike, root: str | os.PathLike | None, within: str = "the checkpoint"
) -> str:
    """The real path of `path`, refusing loops, missing targets and escapes from `root`
    (`within` names it in the message). A path named under `root` is first walked inside
    it (`confined_stat`): `os.path.realpath` looks up where a link leads, the outside
    target included, and said "file is missing" for a link to a missing file outside,
    which told whether a file out there exists. For a `ModelDirRoot`, a link spelt as a
    cache blob is looked up, and read when it is one (`hf_cache.is_blob`)."""
    if root is not None:
        _refuse_leading_out(path, root, within)
    try:
        real = os.path.realpath(path, strict=True)
    except FileNotFoundError:
        raise CheckpointFileError(f"{path}: {_missing_or_kind(path)}") from None
    except OSError as err:  # ELOOP, ENAMETOOLONG, EACCES: say which, in one line
        reason = "symlink loop" if err.errno == errno.ELOOP else (err.strerror or str(err))
        raise CheckpointFileError(f"{path}: cannot resolve ({reason})") from None
    if root is not None:
        real_root = os.path.realpath(root)
        if os.path.commonpath([real, real_root]) != real_root:
            if not isinstance(root, ModelDirRoot):
                raise CheckpointFileError(f"{path}: resolves outside {within} ({real})")
            if not hf_cache.is_blob(real):
                raise CheckpointFileError(_out_of_model_dir(path, within, _link_text(path, real)))
    return real


def _missing_or_kind(path: str | os.PathLike) -> str:
    """Why `path`, whose real path cannot be found, is not read: missing, or, where it
    opens all the same, what it is. A pipe given as a file (`/dev/stdin` under `cat x |`,
    `<(cat x)`'s `/dev/fd/63`) is a link of /proc's to `pipe:[N]`, no name at all, and was
    said to be "file is missing"."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "file is missing"
    return "file is missing" if stat.S_ISREG(mode) else f"{kind_name(mode)}, not a regular file"


def _refuse_leading_out(path: str | os.PathLike, root: str | os.PathLike, within: str) -> None:
    """CheckpointFileError when a link (or `..`) in `path` leads out of `root`, found
    without looking at anything outside (but a model dir's link spelt as a cache blob, left
    to the real-path check). A path not spelt under `root` (a model dir named through a
    link, checked against its real folder) is spelt under it first (`_spelt_under`): left
    to `realpath`, a link in it to a missing file outside said "file is missing", which
    told whether a file out there exists."""
    spelt = _spelt_under(path, root)
    if spelt is None:
        return
    try:
        confined_stat(spelt, root)
    except LeadsOutError as err:
        if not isinstance(root, ModelDirRoot):
            raise CheckpointFileError(f"{path}: resolves outside {within}") from None
        if err.target is None or not hf_cache.is_blob_name(err.target):
            raise CheckpointFileError(_out_of_model_dir(path, within, err.target)) from None
    except PermissionError:  # a directory not to be searched: realpath names it
        return


def _spelt_under(path: str | os.PathLike, root: str | os.PathLike) -> Path | None:
    """`path` spelt under `root`: as given when it is; else with the first folder on its
    way that resolves to `root`'s real folder (a model dir named through a link, or a
    parent of it) replaced by that folder; None when none does. Folders are resolved from
    the top down and the walk stops at the root's folder: nothing in the model dir is
    resolved here (`confined_stat` walks that, inside it)."""
    here = Path.cwd()  # `here / path` is `path` when absolute; its `..` are kept
    full = here / path
    if full.is_relative_to(here / root):
        return full
    real_root = os.path.realpath(root)
    for parent in reversed(full.parents):
        if os.path.realpath(parent) == real_root:
            return Path(real_root) / full.relative_to(parent)
    return None


def _out_of_model_dir(path: str | os.PathLike, within: str, target: str | None) -> str:
    """The line refusing a model dir's `path`, which leads to `target` outside `within`:
    it names the target and, when that is in the Hugging Face cache, the rule it broke."""
    line = f"{path}: resolves outside {within}" + (f" ({target})" if target else "")
    if target and hf_cache.names_cache(target):
        line += f"; {hf_cache.BLOB_RULE}"
    return line


def _link_text(path: str | os.PathLike, real: str) -> str:
    """What a refusal names as where `path` leads: the text of the link at `path`, as the
    user wrote it, else (a link on the way) its real path."""
    try:
        return os.readlink(os.fspath(path))
    except OSError:  # not a link
        return real


def model_dir_root(directory: str | os.PathLike) -> ModelDirRoot:
    """Where the files of a Hugging Face model dir may lead: the dir itself, or for a
    snapshot in the Hugging Face cache (`.../models--ORG--NAME/snapshots/REVISION/`, or a
    folder in it, whose files are links into the cache's `blobs/`), that model's cache
    folder; and, as for any model dir, to a blob of the cache (`ModelDirRoot`). A model
    repo is downloaded or cloned from elsewhere, and git keeps symlinks: one that leads to
    a user's file must not be copied into an export as a tokenizer file. Only a real cache
    folder widens the root: any folder named `snapshots` did (`~/snapshots/run/`, whose
    links could then lead anywhere in the home directory)."""
    real = Path(os.path.realpath(directory))
    return ModelDirRoot(hf_cache.cache_folder(real) or real)


def regular_file(
    path: str | os.PathLike, root: str | os.PathLike | None = None, within: str = "the checkpoint"
) -> str:
    """The real path of `path` after checking it is a regular file inside `root`."""
    real = resolve_inside(path, root, within)
    mode = os.stat(real).st_mode
    if not stat.S_ISREG(mode):
        raise CheckpointFileError(f"{path}: {kind_name(mode)}, not a regular file")
    return real


def open_regular(
    path: str | os.PathLike, root: str | os.PathLike | None = None, within: str = "the checkpoint"
) -> int:
    """A read-only descriptor of a regular file inside `root` (`within` names it); the
    caller closes it.

    O_NONBLOCK keeps a FIFO swapped in after the check from blocking the open, and the
    descriptor itself is checked again, so the check and the read see the same file.
    """
    real = regular_file(path, root, within)
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise CheckpointFileError(f"{path}: unreadable ({err.strerror or err})") from None
    _refuse_unless_regular(fd, path)
    return fd


def _refuse_unless_regular(fd: int, path: str | os.PathLike) -> None:
    """Close `fd` and refuse it, naming `path`, unless it is a regular file: the descriptor is
    what gets read or written, so it is checked, not the name it was opened by (a FIFO or a
    device may have been swapped in after the name was checked)."""
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise CheckpointFileError(f"{path}: {kind_name(mode)}, not a regular file")


def open_regular_for_writing(path: str | os.PathLike, append: bool = False) -> int:
    """A write descriptor of `path` (created if missing; emptied unless `append`), the caller
    closes it. A run dir's own files (metrics.jsonl, config.yaml) are written in place, and
    opening a FIFO found there for writing blocked the run until a reader came (for ever), a
    link to a device swallowed its records: anything but a regular file is refused, one
    line naming it, without blocking (O_NONBLOCK: a FIFO with no reader fails with ENXIO).
    A symlink at `path` is never followed (O_NOFOLLOW): writing through one changed the file
    it leads to, outside the directory written."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | (os.O_APPEND if append else 0), 0o644)
    except OSError as err:
        kinds = {errno.ENXIO: "a FIFO", errno.EISDIR: "a directory", errno.ELOOP: "a symlink"}
        kind = kinds.get(err.errno or 0)
        if kind is None:
            raise
        raise CheckpointFileError(f"{path}: {kind}, not a regular file") from None
    _refuse_unless_regular(fd, path)
    if not append:
        os.ftruncate(fd, 0)
    os.set_blocking(fd, True)
    return fd


def check_size(path: str | os.PathLike, size: int, limit: int) -> None:
    """Refuse a file of `size` bytes larger than `limit`, naming it (checked before a read,
    so a huge file is never read whole)."""
    if size > limit:
        raise CheckpointFileError(f"{path}: {size} bytes, more than the {limit} this file may have")


def read_bytes(path: str | os.PathLike, limit: int, root: str | os.PathLike | None = None) -> bytes:
    """All bytes of a regular file inside `root`, refusing files larger than `limit`."""
    fd = open_regular(path, root)
    try:
        check_size(path, os.fstat(fd).st_size, limit)
        chunks, total = [], 0
        while total <= limit:
            piece = os.read(fd, min(1 << 20, limit + 1 - total))
            if not piece:
                break
            chunks.append(piece)
            total += len(piece)
        if total > limit:  # grew while being read
            raise CheckpointFileError(f"{path}: more than the {limit} bytes this file may have")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike, limit: int, root: str | os.PathLike | None = None) -> str:
    """A regular file's text (UTF-8), bounded as `read_bytes`; bad encoding is one line."""
    data = read_bytes(path, limit, root)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CheckpointFileError(f"{Path(path)}: not UTF-8 text (byte {err.start})") from None
