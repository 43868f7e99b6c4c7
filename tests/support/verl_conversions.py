"""A `mfsdp config from-verl` conversion's config as its source gave it, without the verl
defaults written for the keys the source leaves out (`trainer.verl_defaults`), for tests
about how a source's own keys are read."""

from __future__ import annotations

import copy
from typing import Any

from trainer.verl_import import Conversion

WRITTEN = ": verl's default ("  # how the note on a default written reads


def as_given(conversion: Conversion) -> dict[str, Any]:
    """`conversion.tree` less each key a note says holds verl's default, and sections left
    empty."""
    tree = copy.deepcopy(conversion.tree)
    for note in conversion.notes:
        if WRITTEN in note:
            *sections, leaf = note.split("=", 1)[0].split(".")
            holder = tree
            for name in sections:
                holder = holder[name]
            del holder[leaf]
    return {key: value for key, value in tree.items() if value != {}}
