"""Each name a manifest lists is screened by a string test (`_may_leave`) before the one
rule (`check_relative_name`) parses it: a 64 MiB manifest listing 800,000 names kept
`ckpt inspect` busy 32 s, half of it in parsing each into a Path. The screen must pass
every name the rule refuses, so what is refused is what was refused before."""

from __future__ import annotations

import itertools
import json

import pytest

from mfsdp_ckpt.format.manifest import Manifest, ManifestError, _may_leave
from mfsdp_ckpt.format.manifest_digest import sealed
from mfsdp_ckpt.storage.byte_store import CheckpointFileError, check_relative_name

RECORD = {"size": 1, "xxh3_128": "0" * 32}


def _refused(name: str) -> bool:
    try:
        check_relative_name(name)
    except CheckpointFileError:
        return True
    return False


def test_the_screen_passes_every_name_the_rule_refuses():
    """Every name of up to 6 characters from the characters the rule looks at."""
    names = ("".join(chars) for n in range(7) for chars in itertools.product("a./\x00", repeat=n))
    slipped = [name for name in names if _refused(name) and not _may_leave(name)]
    assert slipped == []


def _manifest(names: list[str]) -> str:
    data = {
        "format_version": 2,
        "step": 1,
        "world_size": 1,
        "strategy": "fsdp2",
        "contents": ["model"],
        "files": {name: RECORD for name in names},
    }
    return json.dumps(sealed(data))


@pytest.mark.parametrize(
    "name", ["", "/etc/passwd", "//x", "..", "../x", "a/../../x", "dist_ckpt/..", "a\x00b"]
)
def test_every_name_that_leaves_is_still_refused(name):
    with pytest.raises(ManifestError) as caught:
        Manifest.from_json(_manifest([name]), "m.json")
    assert "escapes the checkpoint directory" in str(caught.value), caught.value


def test_names_that_stay_inside_are_read():
    names = ["dist_ckpt/__0_0.distcp", "a..b/c", "./x", "x/./y", "x//y", "...", "..a"]
    assert sorted(Manifest.from_json(_manifest(names), "m.json").files) == sorted(names)
