"""A comment line inside the verl command's `\\` continuation ends the command there, as in
bash (verl's run_qwen3_vl-30b-megatron.sh has one); the `key=value` lines after it, which
bash runs as a command of their own, are named in a note.

Was: read as bash reads them, the keys after the comment were lost without a word (verl's
`total_epochs` default, 30, trained in their place).
"""

from __future__ import annotations

from trainer.verl_import import convert_verl


def test_the_lines_after_the_comment_are_named(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo \\\n"
        "    algorithm.adv_estimator=grpo \\\n"
        "    actor_rollout_ref.model.path=/m \\\n"
        "    # data.train_batch_size=64 \\\n"
        "    data.train_files=/d/t.parquet \\\n"
        "    trainer.total_epochs=2\n"
    )
    conversion = convert_verl(script)
    assert "data" not in conversion.tree or "train_files" not in conversion.tree["data"]
    notes = [note for note in conversion.notes if note.startswith("line 5: ")]
    assert notes == [
        "line 5: data.train_files, trainer.total_epochs: key=value words bash runs as a command"
        " of their own, not verl's: the verl command ends before them (a comment line, or a"
        " line without its trailing backslash, inside its continuation), so verl never gets"
        " them and they are not in this config; put them back in the verl command if they are"
        " its"
    ]


def test_a_script_without_one_has_no_such_note(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \\\n"
        "    data.train_files=/d/t.parquet\n"
        "echo done data.x=1\n"
    )
    assert not [n for n in convert_verl(script).notes if "bash runs as a command" in n]
