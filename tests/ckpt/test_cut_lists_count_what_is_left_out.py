"""Every list an error line cuts short says how many it left out, in the spelling of
`first_of` ("a, b, c (+N more)"), or "(+N older) ..." where the newest steps are the ones
shown. Were: " and N more", ", ..." and " ..." with no count, "N more, " in front, and
lists cut (or never cut) with no marker at all: "holds 10 runs; give one of them" named 8."""

from __future__ import annotations

from pathlib import Path

import pytest

from mfsdp_ckpt.check.printable import first_of
from mfsdp_ckpt.convert.export_source import AssetFiles
from mfsdp_ckpt.format import checkpoint_resolution, layout, run_steps
from mfsdp_ckpt.format.file_hash import FileRecord
from mfsdp_ckpt.lora import BaseModelRecord, base_mismatch
from mfsdp_ckpt.storage.out_dir import replaceable_problem
from mfsdp_ckpt.storage.safetensors_source import SafetensorsError, chosen_files

SHOWN = layout.MAX_RUNS_LISTED


def _dirs(parent: Path, names: list[str]) -> Path:
    for name in names:
        (parent / name).mkdir(parents=True)
    return parent


def _saved_steps(parent: Path, names: list[str], last: str = ".metadata") -> Path:
    """Step dirs each holding the file their save writes last (DCP's `.metadata`, mfsdp's
    `manifest.json`): an empty one is a save that wrote nothing, which every list of a
    run's step dirs marks as not finished."""
    for name in _dirs(parent, names).iterdir():
        (name / last).write_bytes(b"")
    return parent


def _refusal(path: Path) -> str:
    with pytest.raises((layout.CheckpointPathError, layout.IncompleteCheckpointError)) as caught:
        checkpoint_resolution.resolve_checkpoint(path)
    return str(caught.value)


def _newest_listed(names: list[str]) -> str:
    """The newest SHOWN of `names` (oldest first) after how many older ones are left out."""
    return f"(+{len(names) - SHOWN} older) {', '.join(names[-SHOWN:])}"


def test_a_broken_tracker_counts_the_older_step_dirs_before_the_newest(tmp_path):
    """Was " (step dirs here: 2 more, global_step_3, ...)": a count read as a step dir."""
    names = [f"global_step_{step}" for step in range(1, SHOWN + 3)]
    run = _saved_steps(tmp_path / "run", names, layout.MANIFEST_FILE)
    (run / layout.TRACKER_FILE).write_text("broken")
    with pytest.raises(layout.DamagedRunDirError) as caught:
        run_steps.resume_step(run)
    assert str(caught.value).endswith(f" (step dirs here: {_newest_listed(names)})")


def test_step_dirs_without_a_tracker_count_the_older_ones(tmp_path):
    names = [f"global_step_{step}" for step in range(1, SHOWN + 4)]
    said = _refusal(_saved_steps(tmp_path / "run", names))
    assert f"; give one of them ({_newest_listed(names)}): none is taken" in said, said


def test_an_unfinished_tracked_save_lists_the_other_step_dirs_cut_and_counted(tmp_path):
    """The other step dirs were all listed, however many there were."""
    names = [f"iter_{step:07d}" for step in range(1, SHOWN + 5)]
    run = _saved_steps(tmp_path / "run", names)
    (run / "iter_0000200").mkdir()
    (run / layout.TRACKER_FILE).write_text("200")
    said = _refusal(run)
    assert said.endswith(f" (other step dirs here: {_newest_listed(names)})"), said


def test_the_hf_trainer_s_other_checkpoints_count_the_older_ones(tmp_path):
    names = [f"checkpoint-{number}" for number in range(1, SHOWN + 4)]
    said = _refusal(_dirs(tmp_path / "out", [*names, "checkpoint-100"]))
    assert f"; other checkpoint dirs here: {_newest_listed(names)})" in said, said


def test_many_runs_name_the_first_and_count_the_rest(tmp_path):
    runs = [tmp_path / "runs" / f"r{index}" for index in range(SHOWN + 2)]
    for run in runs:
        run.mkdir(parents=True)
        (run / layout.TRACKER_FILE).write_text("1")
    said = _refusal(tmp_path / "runs")
    shown = ", ".join(map(str, runs[:SHOWN]))
    assert said.endswith(f"holds {len(runs)} runs; give one of them ({shown} (+2 more))"), said


def test_many_accelerate_models_name_the_first_and_count_the_rest(tmp_path):
    models = [f"pytorch_model_fsdp_{k}" for k in range(SHOWN + 3)]
    said = _refusal(_dirs(tmp_path / "checkpoint-3", models))
    shown = ", ".join(f"{model}/" for model in models[:SHOWN])
    assert f": holds {shown} (+3 more) (one per model Accelerate prepared)" in said, said


def test_an_export_dir_holding_other_files_names_three_and_counts_the_rest(tmp_path):
    foreign = [f"notes{index}.txt" for index in range(5)]
    for name in ["config.json", "model.safetensors", *foreign]:  # an export, and more
        (tmp_path / name).write_text("{}")
    said = replaceable_problem(tmp_path)
    assert said == f"holds what no export writes ({first_of(foreign, 3)})"
    assert said.endswith(" (+2 more))")


def test_files_left_out_of_an_export_are_counted_past_the_third():
    note = AssetFiles({}, [f"extra{index}.txt" for index in range(5)]).left_out_note("/m")
    assert note == [
        "/m: 5 other file(s) not copied (only config, tokenizer and chat template files are):"
        " extra0.txt, extra1.txt, extra2.txt (+2 more)"
    ]


def test_pickled_weights_name_two_and_count_the_rest(tmp_path):
    pickled = [f"pytorch_model-0000{index}.bin" for index in range(1, 5)]
    for name in pickled:
        (tmp_path / name).write_bytes(b"pickle")
    with pytest.raises(SafetensorsError) as caught:
        chosen_files(tmp_path, [])
    assert f"; {pickled[0]}, {pickled[1]} (+2 more) is a pickle, which" in str(caught.value)


def test_other_base_files_that_differ_are_named_after_the_first():
    """Was "(and 4 more file(s) differ)": which ones, the user had to find out."""
    record = FileRecord(1000, "a" * 32, "xxh3_128")
    names = [f"model-{index}.safetensors" for index in range(5)]
    trained_on = BaseModelRecord("/old", False, None, {name: record for name in names})
    now = BaseModelRecord("/new", False, None, {})
    said = base_mismatch(trained_on, now)
    assert said is not None
    assert said.endswith(
        f"{names[0]} is missing (and 4 more file(s) differ: {names[1]}, {names[2]}, {names[3]}"
        " (+1 more))"
    ), said
