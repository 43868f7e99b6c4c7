"""verl's `trainer.resume_from_path` is read as the verl trainer of the run reads it:
`main_ppo` (GRPO) only with `trainer.resume_mode=resume_path`, its SFT trainers under `auto`
(the default) too. A path verl does not read is ignored with a note.

Was: a GRPO run's path under `auto` became `model.path` (the base model and the KL
reference replaced by the step verl never loaded) or, off this machine, `checkpoint.resume`,
which `mfsdp train` refused; and an SFT run's note spoke of the KL reference.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from mfsdp_ckpt.convert.import_hf import import_hf
from tests.support.interop_layouts import verl_run_of_import
from trainer.config import SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.tiny import build_tiny_model_dir
from trainer.verl_import import convert_verl


@pytest.fixture(scope="module")
def step(tmp_path_factory) -> Path:
    """A verl run dir's step (an import as its actor's dist_ckpt, as docs/interop.md
    builds one)."""
    root = tmp_path_factory.mktemp("verl_resume_auto")
    model = build_tiny_model_dir(root / "hf", seed=0, with_weights=True)
    import_hf(model, root / "mcore", layout_name="mcore")
    verl_run_of_import(root / "mcore", model, root / "verl", 2)
    return root / "verl" / "global_step_2"


def _notes(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "resume" in r.getMessage()]


@pytest.mark.parametrize("mode", [[], ["trainer.resume_mode=auto"]])
def test_grpo_under_auto_ignores_a_verl_step(step, caplog, mode):
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        cfg = load_config(
            GRPOConfig,
            None,
            ["actor_rollout_ref.model.path=/m", *mode, f"trainer.resume_from_path={step}"],
        )
    assert (cfg.model.path, cfg.checkpoint.resume) == ("/m", "auto")
    default = "" if mode else " (its default)"
    assert _notes(caplog)[0] == (
        f"note: verl's trainer.resume_from_path={step} is ignored: verl's main_ppo reads it only"
        f" with trainer.resume_mode=resume_path; under auto{default} it resumes the run dir's own"
        " newest step, else starts from actor_rollout_ref.model.path, as checkpoint.resume=auto"
        " does"
    )


def test_grpo_under_auto_ignores_a_path_not_on_this_machine(tmp_path):
    absent = tmp_path / "cluster" / "global_step_50"
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_files=/d"
        f" actor_rollout_ref.model.path=/m trainer.resume_from_path={absent}\n"
    )
    conversion = convert_verl(script)
    assert conversion.tree["model"]["path"] == "/m"
    assert "checkpoint" not in conversion.tree, conversion.tree
    assert not conversion.dropped, conversion.dropped
    assert any(f"resume_from_path={absent} is ignored" in n for n in conversion.notes)


def test_grpo_under_disable_ignores_the_path(caplog):
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        cfg = load_config(
            GRPOConfig,
            None,
            ["trainer.resume_mode=disable", "trainer.resume_from_path=/r/global_step_4"],
        )
    assert cfg.checkpoint.resume == "disable" and cfg.model.path is None
    assert "under disable it starts from actor_rollout_ref.model.path" in _notes(caplog)[0]


def test_sft_under_auto_starts_from_the_step_with_its_own_words(step, caplog):
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        cfg = load_config(SFTConfig, None, ["model.path=/m", f"trainer.resume_from_path={step}"])
    assert cfg.model.path == str(step)
    [said] = _notes(caplog)
    assert "in place of verl's model.path or model.partial_pretrain)" in said, said
    assert "KL reference" not in said and "actor_rollout_ref" not in said
