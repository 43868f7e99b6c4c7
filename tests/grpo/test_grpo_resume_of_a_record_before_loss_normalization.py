"""A GRPO run recorded before `actor.loss_normalization` was a key, resumed by this mfsdp.

On `seq-mean-token-sum-norm` that run divided its loss by the micro-batch count, which is
`micro_batch` now, not the default `global`: the resume went on with a loss 16 times smaller,
said nothing, and rewrote RUN/config.yaml as if the run had always been `global`, because an
added key at its default counted as no change. Such a key is now compared with the value
that reproduces what the record trained: the resume names the change in the "settings
changed" line, keeps the record as config.until_step_N.yaml, and says which setting keeps
the old weighting. Every other mode trained as `global`, and an added key whose old
behaviour does not depend on the record is still no change at its default.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.grpo import grpo_config, write_rl_rows
from trainer.config import config_to_dict
from trainer.config_history import changed_keys
from trainer.grpo.config import GRPOConfig
from trainer.grpo.runner import GRPO_RUN, run_grpo
from trainer.resume import PROMPTS_DIGEST, ROWS_DIGEST, SHUFFLE, data_change_warning, new_progress

NORM = "actor.loss_agg_mode=seq-mean-token-sum-norm"


def _as_recorded_before_the_key(config_yaml: Path) -> None:
    """RUN/config.yaml as an mfsdp without `actor.loss_normalization` wrote it."""
    lines = config_yaml.read_text().splitlines(keepends=True)
    kept = [line for line in lines if line.strip() != "loss_normalization: global"]
    assert len(kept) == len(lines) - 1, "the record holds the key once"
    config_yaml.write_text("".join(kept))


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> tuple[Path, Path]:
    """A seq-mean-token-sum-norm run stopped at step 1, recorded as before the key."""
    root = tmp_path_factory.mktemp("norm")
    data = write_rl_rows(root / "rl.jsonl")
    run_grpo(grpo_config(data, root / "run", NORM, "trainer.stop_at_step=1"))
    _as_recorded_before_the_key(root / "run" / "config.yaml")
    return root, data


def test_the_default_on_a_record_of_the_micro_batch_scale_is_a_changed_setting(
    stopped, tmp_path, capsys
):
    root, data = stopped
    run = shutil.copytree(root / "run", tmp_path / "run")
    recorded = (run / "config.yaml").read_text()
    capsys.readouterr()
    run_grpo(grpo_config(data, run, NORM))
    err = capsys.readouterr().err
    assert (
        "[grpo] resumed with settings changed since step 1: actor.loss_normalization"
        " 'micro_batch' -> 'global' (no such key when the step was trained, which trained as"
        " micro_batch: actor.loss_normalization=micro_batch keeps that); the config step 1"
        f" was trained with is kept as {run / 'config.until_step_1.yaml'}\n"
    ) in err, err
    assert (run / "config.until_step_1.yaml").read_text() == recorded
    assert "warning:" not in err, err  # a same-command GRPO resume: schedule and rows alike


def test_the_setting_that_keeps_the_old_scale_resumes_without_a_line(stopped, tmp_path, capsys):
    root, data = stopped
    run = shutil.copytree(root / "run", tmp_path / "run")
    capsys.readouterr()
    run_grpo(grpo_config(data, run, NORM, "actor.loss_normalization=micro_batch"))
    err = capsys.readouterr().err
    assert "settings changed" not in err and "warning:" not in err, err
    assert not (run / "config.until_step_1.yaml").exists()


def test_only_a_key_whose_old_behaviour_depends_on_the_record_is_compared_with_it():
    defaults = config_to_dict(GRPOConfig())
    now = config_to_dict(GRPOConfig())
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
        earlier = config_to_dict(GRPOConfig())
        earlier["actor"]["loss_agg_mode"] = now["actor"]["loss_agg_mode"] = mode
        del earlier["actor"]["loss_normalization"], earlier["actor"]["clip_ratio_c"]
        assert changed_keys(earlier, now, defaults) == [], mode  # both trained as now
    earlier["actor"]["loss_agg_mode"] = now["actor"]["loss_agg_mode"] = "seq-mean-token-sum-norm"
    assert changed_keys(earlier, now, defaults) == [
        "actor.loss_normalization 'micro_batch' -> 'global' (no such key when the step was"
        " trained, which trained as micro_batch: actor.loss_normalization=micro_batch keeps"
        " that)"
    ]
    now["actor"]["loss_normalization"] = "micro_batch"
    now["actor"]["loss_agg_mode"] = earlier["actor"]["loss_agg_mode"] = "token-mean"
    assert changed_keys(earlier, now, defaults) == [
        "actor.loss_normalization 'global' -> 'micro_batch' (no such key when the step was"
        " trained, which trained as global: actor.loss_normalization=global keeps that)"
    ]


def test_a_grpo_checkpoint_saved_before_the_digests_resumes_without_a_line(tmp_path):
    """Its rows digest is of the rows' own values, and its token-mean resumes were
    bit-identical: nothing to say (SFT's says its trained tokens cannot be compared)."""
    saved = {**new_progress(2, 8, 0, 1, True, 7), "step": 1}
    for key in (ROWS_DIGEST, SHUFFLE, PROMPTS_DIGEST):
        del saved[key]
    now = new_progress(2, 8, 0, 2, True, 7)
    assert data_change_warning(GRPO_RUN, now, saved, tmp_path / "global_step_1", ["rl"]) is None
