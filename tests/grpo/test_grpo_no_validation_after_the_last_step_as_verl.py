"""verl's `trainer.test_freq=-1` (main_ppo's default) never validates, not even after the
last step (ray_trainer's `fit`: `test_freq > 0 and (is_last_step or ...)`); it is
`trainer.eval_every: 0` plus `trainer.val_after_last_step: false` here. mfsdp's own default
validates after the last step whenever it has validation data.

Was: `test_freq=-1` became `eval_every: 0` alone, and the run validated after its last step
(`step 2/2 ... val=...`), which verl never does: costly on a large validation set.
"""

from __future__ import annotations

import pytest

from tests.grpo.test_grpo_runner import _overrides, task  # noqa: F401  (task: a fixture)
from tests.support.metrics import read_metrics
from trainer.config import load_config
from trainer.grpo.config import GRPOConfig
from trainer.grpo.runner import run_grpo


@pytest.mark.parametrize(
    "given, validated",
    [(["trainer.test_freq=-1"], False), (["trainer.eval_every=0"], True)],
)
def test_validation_after_the_last_step(task, given, validated):  # noqa: F811
    root, files, reward = task
    run = f"last_{validated}"
    overrides = _overrides(root, files, reward, run, steps=1)
    overrides = [o for o in overrides if not o.startswith("trainer.eval_every=")] + given
    cfg = load_config(GRPOConfig, None, overrides)
    assert cfg.trainer.val_after_last_step is validated
    run_grpo(cfg)
    records = read_metrics(root / run)
    assert [r for r in records if "reward/mean" in r], records  # the step trained
    assert any("val/accuracy" in r for r in records) is validated, records


@pytest.mark.parametrize(
    "given, written",
    [
        ("trainer.test_freq=-1", False),
        ("trainer.test_freq=0", False),
        ("", False),
        ("trainer.test_freq=5", None),
    ],
)
def test_from_verl_writes_it_as_main_ppo_validates(tmp_path, given, written):
    """verl's default test_freq is -1: a script that sets none never validates either."""
    from trainer.verl_import import convert_verl

    script = tmp_path / "run.sh"
    script.write_text(f"python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo {given}\n")
    conversion = convert_verl(script)
    assert conversion.tree["trainer"].get("val_after_last_step") is written, conversion.tree
    if not given:
        assert any(
            n.startswith("trainer.val_after_last_step=false: verl's default (trainer.test_freq:")
            for n in conversion.notes
        ), conversion.notes


def test_a_validation_between_logged_steps_is_recorded(task):  # noqa: F811
    """eval_every 1 under log_every 2: step 1's validation ran (its rollouts were scored)
    and its val/accuracy was never written, since only logged steps wrote their record."""
    root, files, reward = task
    overrides = _overrides(root, files, reward, "val_between_logs", steps=2)
    overrides = [o for o in overrides if not o.startswith("trainer.eval_every=")]
    cfg = load_config(GRPOConfig, None, [*overrides, "trainer.eval_every=1", "trainer.log_every=2"])
    result = run_grpo(cfg)
    logged = {r["step"]: r for r in read_metrics(root / "val_between_logs")}
    assert sorted(logged) == [1, 2], logged
    assert logged[1]["val/accuracy"] == result.val_accuracy[1], logged
