"""A mistyped path is offered the existing name it likely meant, and only a close one:
`ckpts/verl_run/global_step_40` in the repository root got "did you mean scripts?"
(difflib's default cutoff, 0.6, takes `scripts` for `ckpts`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mfsdp_ckpt.format.closest_path import closest_existing


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    for name in (
        "scripts",
        "cli",
        "runs/demo/sft/global_step_40",
        "runs/demo/sft/global_step_40/dist_ckpt",
        "checkpoints/run/global_step_40",
        "mlm/iter_0000003",
        "mlm/iter_0000030",
    ):
        (tmp_path / name).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("given", ["ckpts/verl_run/global_step_40", "scr", "runs/dm/sft"])
def test_a_name_that_is_not_close_gets_no_guess(root, given):
    assert closest_existing(given) is None


@pytest.mark.parametrize(
    "given, meant",
    [
        ("runs/demo/sf", "runs/demo/sft"),
        ("runs/dmeo/sft", "runs/demo/sft"),
        ("run/demo", "runs/demo"),
        ("runs/demo/sft/global_step_41", "runs/demo/sft/global_step_40"),
        ("checkpoint/run/global_step_40", "checkpoints/run/global_step_40"),
        ("{root}/runs/dmo", "{root}/runs/demo"),
        ("mlm/iter_3", "mlm/iter_0000003"),
        ("mlm/iter_03", "mlm/iter_0000003"),
        ("mlm/iter_30", "mlm/iter_0000030"),
        ("runs/demo/sft/global_step_40/dist", "runs/demo/sft/global_step_40/dist_ckpt"),
        ("runs/demo/sft/global_step_40/ckpt", "runs/demo/sft/global_step_40/dist_ckpt"),
    ],
)
def test_a_typo_gets_the_name_it_meant(root, given, meant):
    assert closest_existing(given.format(root=root)) == Path(meant.format(root=root))
