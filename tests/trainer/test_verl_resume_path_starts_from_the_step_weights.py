"""verl's `trainer.resume_mode=resume_path` + `trainer.resume_from_path=<global_step_N>`
names a step verl saved, whose optimizer, dataloader and step mfsdp does not resume: a
path holding one is carried over as `model.path` (the run starts from its weights), with a
note saying so; one holding an mfsdp step stays `checkpoint.resume`; one not on this machine
stays `checkpoint.resume` with a note naming `model.path` for a verl step there.

Was: `checkpoint.resume=<that step>` at exit 0 and no note, which `mfsdp train` refused
once it had started (and GRPO only after its rollout engine).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from mfsdp_ckpt.convert.import_hf import import_hf
from tests.support.interop_layouts import verl_run_of_import
from trainer.config import load_config
from trainer.grpo.config import GRPOConfig
from trainer.tiny import build_tiny_model_dir
from trainer.verl_import import convert_verl

RESUME = "trainer.resume_mode=resume_path"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A verl run dir of one step (an import as its actor's dist_ckpt, as docs/interop.md
    builds one), an mfsdp import's step, and the model dir."""
    root = tmp_path_factory.mktemp("verl_resume")
    model = build_tiny_model_dir(root / "hf", seed=0, with_weights=True)
    import_hf(model, root / "mcore", layout_name="mcore")
    verl_run_of_import(root / "mcore", model, root / "verl", 2)
    import_hf(model, root / "imported", layout_name="hf")
    return root / "verl" / "global_step_2", root / "imported" / "global_step_0", model


def _loaded(caplog, *overrides: str) -> tuple[GRPOConfig, list[str]]:
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        cfg = load_config(GRPOConfig, None, list(overrides))
    notes = [r.getMessage() for r in caplog.records if "resume_from_path" in r.getMessage()]
    return cfg, notes


def test_a_verl_step_is_model_path_with_a_note(made, caplog):
    step, _, model = made
    cfg, notes = _loaded(
        caplog,
        f"actor_rollout_ref.model.path={model}",
        RESUME,
        f"trainer.resume_from_path={step}",
    )
    assert (cfg.model.path, cfg.checkpoint.resume) == (str(step), "auto")
    assert notes == [
        f"note: verl's trainer.resume_mode/resume_from_path is model.path={step} here (in place"
        " of verl's actor_rollout_ref.model.path, and the KL reference with it): a verl-rl-v1"
        " checkpoint, whose optimizer, dataloader and step mfsdp does not resume, so the run"
        " starts from its weights at step 0; give a trainer.run_dir other than verl's run dir"
    ]


def test_an_mfsdp_step_is_resumed(made, caplog):
    _, imported, _ = made
    cfg, notes = _loaded(caplog, RESUME, f"trainer.resume_from_path={imported}")
    assert cfg.checkpoint.resume == str(imported) and cfg.model.path is None
    assert notes == [
        f"note: verl's trainer.resume_mode/resume_from_path is checkpoint.resume={imported} here"
    ]


def test_a_path_not_here_stays_checkpoint_resume_and_names_model_path(tmp_path, caplog):
    absent = tmp_path / "verl" / "global_step_4"
    cfg, notes = _loaded(caplog, RESUME, f"trainer.resume_from_path={absent}")
    assert cfg.checkpoint.resume == str(absent)
    assert len(notes) == 1 and notes[0].startswith(
        f"note: verl's trainer.resume_mode/resume_from_path is checkpoint.resume={absent} here,"
        " which resumes a step of an mfsdp run only (no checkpoint is at that path on this"
        f" machine); a verl checkpoint there is refused: give model.path={absent} instead"
    ), notes


def test_from_verl_writes_the_step_as_model_path(made, tmp_path):
    step, _, model = made
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \\\n"
        f"  actor_rollout_ref.model.path={model} \\\n"
        f"  trainer.default_local_dir={step.parent} \\\n"
        f"  {RESUME} trainer.resume_from_path={step}\n"
    )
    conversion = convert_verl(script)
    assert conversion.tree["model"]["path"] == str(step)
    assert "checkpoint" not in conversion.tree, conversion.tree
    assert any(f"model.path={step} here" in note for note in conversion.notes), conversion.notes
