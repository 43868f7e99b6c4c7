"""`ckpt validate RUN` says what `checkpoint.resume=auto` does with the run dir, as
`inspect` and `export-hf` do (the note of `resolve_checkpoint(RUN)`), and names an empty
step dir as the run dir's lists mark it (`run_steps.step_states`).

validate resolved the tracked step dir again on its own, which dropped the run dir's note:
a run whose empty `global_step_6` blocks every resume was `valid:` with no word of it. The
note itself called that empty dir "damaged after it was saved, or another trainer's",
while its list of step dirs marked it "(a save that did not finish)".
"""

from __future__ import annotations

from pathlib import Path

from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.format import checkpoint_resolution, layout, step_saving


def run_with_steps(root: Path, *steps: int, tracked: bool = True) -> Path:
    """An mfsdp run dir `root/run` whose `steps` are complete (a manifest each, nothing
    loadable), the last one tracked unless `tracked` is False."""
    run = root / "run"
    for step in steps:
        target = layout.step_dir(run, step)
        (target / layout.DIST_CKPT_DIR).mkdir(parents=True)
        (target / layout.DIST_CKPT_DIR / layout.DCP_METADATA_FILE).write_bytes(b"saved")
        (target / layout.MANIFEST_FILE).write_text("{}")
    if tracked:
        step_saving.write_tracker(run, steps[-1])
    return run


def test_validate_keeps_the_note_inspect_prints(tmp_path):
    run = run_with_steps(tmp_path, 2, 4)
    layout.step_dir(run, 6).mkdir()  # a save past the tracked step that wrote nothing
    layout.step_dir(run, 1).mkdir()  # an older one: only warned about
    note = checkpoint_resolution.resolve_checkpoint(run).note
    assert note == (
        f"checkpoint.resume=auto refuses this run dir: {run / 'global_step_6'} holds no"
        " manifest.json, which mfsdp writes last (a save that did not finish), and resuming"
        " step 4, a save of step 6 replaces it: move it away"
    )
    assert validate_checkpoint(run).note == note


def test_an_untracked_run_names_an_empty_step_dir_one_way(tmp_path):
    run = run_with_steps(tmp_path, 2, 4, tracked=False)
    layout.step_dir(run, 6).mkdir()
    note = validate_checkpoint(run).note
    assert note is not None and "damaged" not in note
    assert note.count("(a save that did not finish)") == 2, note


def test_a_run_resume_takes_as_it_is_has_no_note(tmp_path):
    run = run_with_steps(tmp_path, 2, 4)
    assert validate_checkpoint(run).note is None
