"""The form a checkpoint URL of each scheme tensorstore reads is written in, checked before
the URL is used.

A URL that names one of these schemes but not in its form is a mistake in what was typed,
not a checkpoint that failed: `file://verl_run` (a relative path after `file://` reads as a
host) failed with tensorstore's parser's words ("file: URIs do not support authority") at
exit 1, and `s3:/x` (one slash) was read as a local path ("no such file or directory").
Each is refused at exit 2 in one line naming the form the scheme takes.
"""

from __future__ import annotations

import os
import re

from mfsdp_ckpt.errors import MfsdpUsageError

FORMS = {
    "file": "file:///abs/path",
    "gs": "gs://BUCKET/path",
    "s3": "s3://BUCKET/path",
    "http": "http://HOST/path",
    "https": "https://HOST/path",
}
_SCHEME = re.compile(r"^(file|gs|s3|https?):", re.IGNORECASE)
_PARSER_PREFIX = re.compile(r'^Parsing spec from url: ".*?": Invalid kvstore URL component ".*?": ')


class URLFormError(MfsdpUsageError, ValueError):
    """A location written as a URL of a scheme read here, not in that scheme's form (exit 2)."""


def check_url_form(location: str) -> None:
    """URLFormError when `location` starts with one of the schemes (`gs:`, `s3:`, `file:`,
    `http(s):`) but is not in its form: `//` missing (`s3:/x`, unless a local file has that
    name) or a scheme in capitals, `file://` without an absolute path, `gs://`, `s3://` or
    `http(s)://` without a bucket or host."""
    match = _SCHEME.match(location)
    if match is None:
        return
    scheme = match.group(1).lower()
    rest = location[match.end() :]
    if not rest.startswith("//") or match.group(1) != scheme:
        if os.path.lexists(location):  # a local file or folder named so
            return
        raise URLFormError(f"{location}: not a URL of the form {FORMS[scheme]}")
    after = rest[2:]
    if scheme == "file" and not after.startswith("/"):
        host = after.split("/", 1)[0]
        raise URLFormError(
            f"{location}: not a URL of the form {FORMS[scheme]}"
            + (f" ({host!r} there reads as a host)" if host else "")
            + "; a relative path is given as it is, without file://"
        )
    if scheme != "file" and (not after or after.startswith("/")):
        named = "host" if scheme.startswith("http") else "bucket"
        raise URLFormError(
            f"{location}: not a URL of the form {FORMS[scheme]} (no {named} after {scheme}://)"
        )


def parser_refusal(location: str, err: BaseException) -> URLFormError | None:
    """The URLFormError for a URL tensorstore's parser refused (an invalid bucket name, a
    broken `%` escape: forms `check_url_form` leaves to it), None for any other failure."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    if not isinstance(err, ValueError) or not text.startswith("Parsing spec from url"):
        return None
    scheme = location.split(":", 1)[0].lower()
    form = f" of the form {FORMS[scheme]}" if scheme in FORMS else ""
    return URLFormError(f"{location}: not a URL{form} ({_PARSER_PREFIX.sub('', text)})")


__all__ = ["FORMS", "URLFormError", "check_url_form", "parser_refusal"]
