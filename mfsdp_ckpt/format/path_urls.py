"""Telling a URL from a local path, where a command reads or writes local paths only.

`Path()` takes any text for a path: `gs://b/x` became the relative `gs:/b/x` and
`file:///abs/x` the relative `file:/abs/x`. Every place that takes a local path (a
checkpoint to read, an output dir, a path in a config) asks here, so each refuses a URL
in the same words.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

# What no local path looks like: `scheme://...` of any scheme (hdfs:// too), or RFC 8089's
# `file:/abs/x` without an authority, in any case. Any other name with a colon is a local
# path (`run:1/x`, `C:/x`, `x:/g2`, `./a://b`).
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://|file:/", re.IGNORECASE)
# A `file:` URL's parts: `file:///abs/x`, `file:/abs/x`, `file://HOST/abs/x`
_FILE_URL = re.compile(r"file:(?://(?P<host>[^/]*))?(?P<path>/.*)?", re.IGNORECASE | re.DOTALL)
LOCAL_URL_SCHEME = "file://"  # the one URL scheme (URL_SCHEMES) that names a local path
LOCAL_URL_HOSTS = ("", "localhost")  # a `file:` URL's hosts that are this machine


def is_url_not_path(text: str) -> bool:
    """Whether `text`, given where a local path is read or written, is a URL: Path() would
    read `gs://b/x` as the relative `gs:/b/x` and `file:///abs/x` as `file:/abs/x`, and a
    run or export went there with exit 0 saying it was written."""
    return _URL.match(text) is not None


def file_url_path(text: str) -> str | None:
    """The local path a `file:` URL of this machine names (its percent escapes decoded:
    `sp%20ace` is the dir `sp ace`), else None (another URL, another host's file, no path)."""
    parts = _FILE_URL.fullmatch(text)
    if parts is None or not parts.group("path"):
        return None
    if (parts.group("host") or "").lower() not in LOCAL_URL_HOSTS:
        return None
    return unquote(parts.group("path"))


def url_refusal(text: str, remote: str) -> str | None:
    """The one line refusing `text` where a local path is needed, None when it is no URL
    (`is_url_not_path`): a `file:` URL of this machine names the local path to give instead,
    one of another host (or with no path) is said to name no local path, and any other URL
    gets `remote`, what the command needs instead."""
    if not is_url_not_path(text):
        return None
    local = file_url_path(text)
    if local is not None:
        return f"{text}: a {LOCAL_URL_SCHEME} URL; give the local path itself, {local}"
    parts = _FILE_URL.fullmatch(text)
    if parts is None:
        return f"{text}: a URL; {remote}"
    host = parts.group("host") or ""
    what = "naming no path" if host.lower() in LOCAL_URL_HOSTS else f"of the host {host}"
    return (
        f"{text}: a {LOCAL_URL_SCHEME} URL {what}, not a path on this machine; give a local"
        f" path (a relative one as it is, without {LOCAL_URL_SCHEME})"
    )
