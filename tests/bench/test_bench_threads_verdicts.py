"""bench/threads.py checks its requirements, not only prints them: a run whose choice was
1.11x the best fixed count on an idle machine said "(limit 1.10x)" and exited 0."""

from __future__ import annotations

from bench.threads import verdicts


def _rows(condition: str, step_ms: dict[str, float]) -> list[dict]:
    return [
        {"condition": condition, "shape": "tiny", "setting": setting, "step_s": ms / 1000}
        for setting, ms in step_ms.items()
    ]


def test_a_requirement_over_its_limit_is_missed():
    rows = _rows("idle", {"1": 275.8, "2": 1414.3, "torch": 2071.6, "mfsdp": 305.2})
    rows += _rows("busy", {"1": 1717.1, "2": 15450.5, "torch": 4661.3, "mfsdp": 662.5})
    assert verdicts(rows, [1, 2], ["tiny"]) == [
        ("idle tiny: mfsdp's choice 1.11x the best fixed count (limit 1.10x): MISSED", False),
        ("busy tiny: mfsdp's choice 0.39x OMP_NUM_THREADS=1 (limit 1.5x)", True),
    ]


def test_requirements_within_their_limits_are_met():
    rows = _rows("idle", {"1": 79.8, "2": 46.2, "torch": 44.4, "mfsdp": 45.4})
    rows += _rows("busy", {"1": 161.8, "2": 179.0, "torch": 191.6, "mfsdp": 242.7})
    assert verdicts(rows, [1, 2], ["tiny"]) == [
        ("idle tiny: mfsdp's choice 0.98x the best fixed count (limit 1.10x)", True),
        ("busy tiny: mfsdp's choice 1.50x OMP_NUM_THREADS=1 (limit 1.5x)", True),
    ]
