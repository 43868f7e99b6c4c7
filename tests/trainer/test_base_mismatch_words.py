"""A resume onto other frozen weights (a LoRA base, GRPO's KL reference) says which weight
file differs and how: missing, extra, another size (both sizes named) or other bytes of the
same size. Was: "model.safetensors in this run's base ... is missing, extra or has other
bytes", leaving the user to find out which."""

from __future__ import annotations

import pytest

from mfsdp_ckpt.format.file_hash import FileRecord
from mfsdp_ckpt.lora import BaseModelRecord, base_mismatch

A = FileRecord(1000, "a" * 32, "xxh3_128")
B = FileRecord(1000, "b" * 32, "xxh3_128")
LONGER = FileRecord(1200, "c" * 32, "xxh3_128")


def _base(path: str, **files: FileRecord) -> BaseModelRecord:
    return BaseModelRecord(
        path, False, None, {f"{name}.safetensors": r for name, r in files.items()}
    )


@pytest.mark.parametrize(
    "now, how",
    [
        (_base("/new", one=A), "two.safetensors is missing"),
        (
            _base("/new", one=A, two=A, three=A),
            "three.safetensors is a weight file the record does not list",
        ),
        (_base("/new", one=A, two=LONGER), "two.safetensors has 1200 bytes, 1000 recorded"),
        (
            _base("/new", one=A, two=B),
            "two.safetensors has other bytes of the same size (xxh3_128 differs)",
        ),
        (
            _base("/new", one=B, two=LONGER),
            "one.safetensors has other bytes of the same size (xxh3_128 differs) (and 1 more"
            " file(s) differ: two.safetensors)",
        ),
    ],
    ids=["missing", "extra", "size", "digest", "several"],
)
def test_the_file_that_differs_and_how(now, how):
    trained_on = _base("/old", one=A, two=A)
    assert base_mismatch(trained_on, now) == (
        f"adapter was trained on the weights in /old; in this run's base /new, {how}"
    )


def test_the_same_weights_moved_elsewhere_are_no_mismatch():
    assert base_mismatch(_base("/old", one=A), _base("/new", one=A)) is None
