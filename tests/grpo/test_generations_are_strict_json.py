"""Each line of a generations dump is strict JSON: a NaN or infinity in a ground truth (a
parquet `list<double>`) was written as `NaN`, which strict parsers refuse, and bytes as the
Python repr "b'\\xff'"."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from trainer.grpo.generations import dump_generations, generation_rows


def strict(line: str):
    def refuse(constant: str):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(line, parse_constant=refuse)


@pytest.mark.parametrize(
    ("truth", "written"),
    [
        ([math.nan, 1.0], [None, 1.0]),
        ([math.inf, -math.inf], [None, None]),
        ({"a": [math.nan], "b": (2.0, math.nan)}, {"a": [None], "b": [2.0, None]}),
        (np.array([np.nan, 3.0], dtype=np.float32), [None, 3.0]),
        (np.float32("nan"), None),
        (b"4", "4"),
        ("é".encode(), "é"),
        (b"\xff\xfe4", "\\xff\\xfe4"),
        ([b"x", "y", 1, True, None], ["x", "y", 1, True, None]),
    ],
)
def test_a_ground_truth_is_written_as_strict_json(tmp_path, truth, written):
    rows = generation_rows(3, ["p"], ["r"], [truth], [0.5], [1.0], advantages=[0.25])
    dump_generations(tmp_path, 3, rows)
    (line,) = (tmp_path / "3.jsonl").read_text(encoding="utf-8").splitlines()
    row = strict(line)
    assert row["gts"] == written
    assert (row["input"], row["output"], row["score"], row["advantage"]) == ("p", "r", 0.5, 0.25)
