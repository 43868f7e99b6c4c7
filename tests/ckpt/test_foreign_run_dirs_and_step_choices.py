"""verl's and Megatron-LM's run dirs as they are on disk: given as `trainer.run_dir`, as
a run dir to choose a step of, and as torch_dist saves to convert.

Were: a Megatron-LM run dir as trainer.run_dir said "mlm/global_step_4 is missing ...
and no step is complete; move the tracker away" (its iter_0000004 complete, and moving
its tracker damages that run), or, without its tracker, "checkpoint.resume=<its oldest
iter> starts from it", which is then refused; a verl run dir said "holds no
manifest.json ... (damaged, or another trainer's); move it and the tracker away". Several
step dirs without a tracker were offered to choose from with an unfinished save among
them; a verl run's tracker naming a removed step said "global_step_2/ / iter_0000002/ is
missing"; the torch_dist refusal gave verl's model merger without --local_dir or
--target_dir, for Megatron-LM's own iter_N/ too, which that merger cannot read.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cli.launch import load_checked_config
from mfsdp_ckpt.format import checkpoint_resolution, layout, run_steps
from tests.support.interop_layouts import BUILDERS, STEP, one_error_line, run_cli
from trainer.config import SFTConfig

RUN_LAYOUTS = ["megatron-lm", "verl-rl-v1", "verl-rl-v2", "verl-sft"]
LOADERS = {  # the load that, with no tracker, takes no step (verl's and Megatron-LM's own)
    "megatron-lm": "Megatron-LM's --load {run}",
    "verl-rl-v1": "verl's resume from {run} (resume_mode=auto)",
}


def _snapshot(run: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def _laid(kind: str, made_optim: Path, tmp_path: Path) -> tuple[Path, Path, int]:
    """The run of layout `kind`, its one complete step dir and that step's number."""
    laid = BUILDERS[kind](made_optim, tmp_path)
    step = laid.levels["step"]
    number = layout.iter_step(step.name) or layout.parse_step_dir_name(step.name)
    assert number is not None
    return laid.run, step, number


def _unfinished_newer(step: Path, number: int) -> Path:
    """A save of a later step that did not finish beside `step`: a .distcp file without
    the `.metadata` DCP writes last, where that layout keeps its DCP."""
    if layout.iter_step(step.name) is not None:
        newer = step.parent / f"iter_{number + 2:07d}"
        dcp = newer
    else:
        newer = layout.step_dir(step.parent, number + 2)
        dcp = newer / "actor" / "dist_ckpt" if (step / "actor").is_dir() else newer / "dist_ckpt"
    dcp.mkdir(parents=True)
    (dcp / "__0_0.distcp").write_bytes(b"x" * 64)
    return newer


@pytest.mark.parametrize("tracker", [True, False], ids=["tracked", "untracked"])
@pytest.mark.parametrize("kind", RUN_LAYOUTS)
def test_another_trainers_run_dir_is_named_and_model_path_given(
    kind, tracker, made_optim, tmp_path, monkeypatch
):
    """One line naming the layout as `ckpt inspect` does, that mfsdp does not resume it,
    and the model.path that reads the step it would: the run itself where its tracker
    picks that step, else its newest complete step (an unfinished newer save is skipped).
    Nothing in the run dir changes, and no tracker or step is to be moved away."""
    monkeypatch.chdir(tmp_path)
    run, step, number = _laid(kind, made_optim, tmp_path)
    _unfinished_newer(step, number)
    if not tracker:
        (run / layout.TRACKER_FILE).unlink()
    before = _snapshot(run)
    given = run if tracker else step
    said = (
        f"trainer.run_dir: {run} is a run dir of layout {kind}, not an mfsdp run: mfsdp does"
        f" not resume it or save into it; to train from its step {number}, give"
        f" model.path={given} with another trainer.run_dir"
    )
    for resume in ("auto", "disable"):
        with pytest.raises(layout.CheckpointPathError) as caught:
            load_checked_config(
                SFTConfig, None, [f"trainer.run_dir={run}", f"checkpoint.resume={resume}"]
            )
        assert str(caught.value) == said
    if kind != "megatron-lm":  # resuming a step 2 from elsewhere would save over its steps
        with pytest.raises(layout.CheckpointPathError, match=f"layout {kind}, not an mfsdp"):
            run_steps.refuse_replacing_steps(run, 2)
    assert checkpoint_resolution.resolve_checkpoint(given).step == number  # the advice reads
    assert _snapshot(run) == before


def test_a_run_dir_of_a_format_mfsdp_does_not_read_is_named_with_that_format(tmp_path):
    """Megatron-LM's legacy iter_N/mp_rank_00/: its own line, after the run dir's."""
    run = tmp_path / "legacy"
    (run / "iter_0000004" / "mp_rank_00").mkdir(parents=True)
    (run / "iter_0000004" / "mp_rank_00" / "model_optim_rng.pt").write_bytes(b"x")
    (run / layout.TRACKER_FILE).write_text("4")
    with pytest.raises(layout.CheckpointPathError) as caught:
        run_steps.resume_step(run)
    assert str(caught.value).startswith(
        f"trainer.run_dir: {run} is another trainer's run dir, which mfsdp does not resume or"
        f" save into: {run / 'iter_0000004'}: a Megatron-LM legacy checkpoint"
    )


def test_a_megatron_tracker_with_no_step_to_read_is_not_to_be_moved(tmp_path):
    """No iter_N/ reads (one unfinished save): still Megatron-LM's tracker, never "move the
    tracker away"."""
    run = tmp_path / "run"
    (run / "iter_0000004").mkdir(parents=True)
    (run / "iter_0000004" / "__0_0.distcp").write_bytes(b"x")
    (run / layout.TRACKER_FILE).write_text("4")
    with pytest.raises(layout.DamagedRunDirError) as caught:
        run_steps.resume_step(run)
    said = str(caught.value)
    assert said.endswith(
        "(step dirs here: iter_0000004 (a save that did not finish)) and no step is complete;"
        " it is Megatron-LM's tracker, which mfsdp does not resume: give another"
        " trainer.run_dir"
    ), said


@pytest.mark.parametrize("kind", ["verl-rl-v1", "megatron-lm"])
def test_step_dirs_to_choose_from_are_the_complete_ones(kind, made_optim, tmp_path):
    run, step, number = _laid(kind, made_optim, tmp_path)
    newer = _unfinished_newer(step, number)
    (run / layout.TRACKER_FILE).unlink()
    with pytest.raises(layout.CheckpointPathError) as caught:
        checkpoint_resolution.resolve_checkpoint(run)
    assert str(caught.value) == (
        f"{run}: 2 step dirs and no {layout.TRACKER_FILE}; give one of them"
        f" ({step.name} (the newest complete one); {newer} is a save that did not finish (it"
        f" holds no {layout.DCP_METADATA_FILE}, which a save writes last)): none is taken, as"
        f" {LOADERS[kind].format(run=run)} would start from scratch"
    )
    code, _out, err = run_cli("ckpt", "inspect", run)
    assert code == 2 and f"give one of them ({step.name} (the newest" in one_error_line(err), err
    shutil.rmtree(step)
    _unfinished_newer(newer, number + 2)
    with pytest.raises(layout.IncompleteCheckpointError, match="none is complete"):
        checkpoint_resolution.resolve_checkpoint(run)


def test_lists_of_step_dirs_mark_an_unfinished_save(made_optim, tmp_path):
    """The tracker's line, and the other step dirs beside a tracked unfinished save."""
    run, step, number = _laid("megatron-lm", made_optim, tmp_path)
    newer = _unfinished_newer(step, number)
    (run / layout.TRACKER_FILE).write_text(layout.MEGATRON_RELEASE_DIR)
    code, out, err = run_cli("ckpt", "validate", run)
    assert code == 1 and one_error_line(out).endswith(  # validate's finding
        f"(step dirs here: {step.name}, {newer.name} (a save that did not finish))"
    ), out + err
    later = _unfinished_newer(newer, number + 2)
    (run / layout.TRACKER_FILE).write_text(str(number + 4))
    with pytest.raises(layout.IncompleteCheckpointError) as caught:
        checkpoint_resolution.resolve_checkpoint(run)
    assert str(caught.value).endswith(
        f"(other step dirs here: {step.name}, {newer.name} (a save that did not finish))"
    ), caught.value
    assert later.name in str(caught.value)


@pytest.mark.parametrize("kind", ["verl-rl-v1", "megatron-lm"])
def test_a_missing_tracked_step_is_named_by_its_layouts_name(kind, made_optim, tmp_path):
    run, step, _number = _laid(kind, made_optim, tmp_path)
    (run / layout.TRACKER_FILE).write_text("7")
    own, other = (
        ("iter_0000007", "global_step_7")
        if kind == "megatron-lm"
        else (
            "global_step_7",
            "iter_0000007",
        )
    )
    with pytest.raises(layout.DamagedRunDirError) as caught:
        checkpoint_resolution.resolve_checkpoint(run)
    assert str(caught.value) == (
        f"{run / layout.TRACKER_FILE}: names step '7', but {own}/ is missing"
        f" (step dirs here: {step.name})"
    )
    assert other not in str(caught.value)


def _torch_dist(dcp: Path) -> Path:
    """Megatron's torch_dist files, as far as telling the format needs them."""
    dcp.mkdir(parents=True)
    for name in ("metadata.json", "common.pt", ".metadata", "__0_0.distcp"):
        (dcp / name).write_bytes(b"{}")
    return dcp


def test_verl_torch_dist_gets_the_whole_merger_line(tmp_path):
    actor = tmp_path / "run" / f"global_step_{STEP}" / "actor"
    _torch_dist(actor / "dist_ckpt")
    (actor / "huggingface").mkdir()
    (actor / "huggingface" / "config.json").write_text("{}")
    with pytest.raises(layout.ForeignFormatError) as caught:
        checkpoint_resolution.resolve_checkpoint(tmp_path / "run")
    said = str(caught.value)
    assert (
        "verl's `python -m verl.model_merger merge --backend megatron"
        f" --local_dir {actor} --target_dir OUT` converts it to Hugging Face (add"
        " --tie-word-embedding for a model whose embeddings are tied)"
    ) in said, said


def test_megatron_lm_torch_dist_is_sent_to_megatron_lm_s_converter(tmp_path):
    """verl's merger reads the Hugging Face config verl saves beside dist_ckpt/, which a
    Megatron-LM iteration dir does not have."""
    step = _torch_dist(tmp_path / "run" / "iter_0000004")
    with pytest.raises(layout.ForeignFormatError) as caught:
        checkpoint_resolution.resolve_checkpoint(step)
    said = str(caught.value)
    assert "verl.model_merger" not in said, said
    assert said.endswith(
        "Megatron-LM's `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 torchrun"
        " tools/checkpoint/checkpoint_inspector.py"
        f" convert-torch-dist-to-fsdp-dtensor {step} OUT` (with --swiglu for a SwiGLU MLP)"
        " rewrites it as --ckpt-format fsdp_dtensor, which mfsdp reads"
    ), said
