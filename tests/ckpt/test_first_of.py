"""`first_of`: the one spelling of "the first few names, then how many more" in error lines."""

from __future__ import annotations

import pytest

from mfsdp_ckpt.check.printable import first_of


@pytest.mark.parametrize("count", [0, 1, 3])
def test_a_list_no_longer_than_shown_is_all_said_with_no_count(count):
    items = [f"layer{i}" for i in range(count)]
    assert first_of(items, 3) == ", ".join(items)


def test_a_longer_list_names_the_first_and_counts_the_rest():
    items = [f"layer{i}" for i in range(10)]
    said = first_of(items, 4)
    assert said.startswith("layer0, layer1, layer2, layer3 ")
    assert "layer4" not in said
    assert said.endswith(f"(+{len(items) - 4} more)")


def test_the_separator_and_non_string_items():
    assert first_of([1, 2, 3], 2, sep="; ") == "1; 2 (+1 more)"
