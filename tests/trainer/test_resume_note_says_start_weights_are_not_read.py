"""A resume with another `model.path` (or adapter, shape, random_init) goes on from the step's
weights, not the new model's. The note named `model.path None -> 'hf/np2'` like any
accepted change; it now says the run continues from global_step_N's weights, and names such a
key first, where "(+N more)" cannot hide it."""

from __future__ import annotations

from dataclasses import replace

from trainer.config import SFTConfig, write_resolved_config
from trainer.config_history import keep_changed_config


def test_a_changed_model_path_is_said_not_read(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    before = SFTConfig()
    write_resolved_config(run, before)
    model = replace(before.model, path=str(tmp_path / "np2"))
    optim = replace(before.optim, lr=0.1)
    note = keep_changed_config(run, 2, replace(before, model=model, optim=optim))
    assert note is not None
    assert note.startswith(
        f"resumed with settings changed since step 2: model.path None -> '{tmp_path / 'np2'}'"
        " (the run trains on from global_step_2's weights, not the new value's; give a new"
        " trainer.run_dir to start from those), optim.lr "
    ), note


def test_other_changes_are_said_as_before(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    before = SFTConfig()
    write_resolved_config(run, before)
    note = keep_changed_config(run, 2, replace(before, optim=replace(before.optim, lr=0.1)))
    assert note is not None and "weights" not in note, note
