"""Running a command as a user whom mode 000 denies, even when the tests run as root."""

from __future__ import annotations

import os
import shutil

import pytest


def without_root_overrides() -> list[str]:
    """A command prefix under which mode 000 denies this user: none needed unless root,
    whose DAC-override capabilities setpriv drops from the bounding set."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root without setpriv: mode 000 cannot deny a read here")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search"]
