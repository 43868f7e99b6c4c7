"""The line a conversion says as it first reads a config.json through transformers.

import-hf always, and export-hf with --verify (or for a family no shape table knows), build
config.json with transformers' own config class; importing transformers (and torch under it)
takes 8-15 s on a 2-core machine, and the command printed nothing meanwhile. The library
reports that moment through `hf_config.reporting_config_checks`; here it becomes one line
on stderr, never under --json (stdout stays the one JSON object, stderr its error line).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from cli.lines import say
from mfsdp_ckpt.convert.hf_config import reporting_config_checks


def checking_line(where: str) -> str:
    """The line said before config.json at `where` is read through transformers."""
    return f"checking config {where} with transformers ..."


@contextlib.contextmanager
def config_check_lines(shown: bool = True) -> Iterator[None]:
    """Within this block, the first config.json read through transformers is said on stderr
    as it begins (nothing when not `shown`: --json)."""
    if not shown:
        yield
        return
    with reporting_config_checks(lambda where: say(checking_line(where), err=True)):
        yield


__all__ = ["checking_line", "config_check_lines"]
