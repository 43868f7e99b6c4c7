"""A message that names some of many items (changed settings, data files, verl keys filled
in) names the first few and then `(+N more)`, the one spelling of `first_of`: the list
was written "(and N more)", " and N more" and "(+N more)" by turns."""

from __future__ import annotations

import re

from tests.support.sft import tiny_config, write_chat_jsonl
from tests.trainer.test_verl_full_config_dump import GENERATED
from trainer.data.files import DataFileError, check_data_file
from trainer.sft import run_sft
from trainer.verl_import import convert_verl

SETTINGS = ("data.global_batch_size=8", "data.max_tokens_per_micro_batch=256")
# seven settings a resume may change (no value holds a comma): one more than a note names
CHANGED = (
    "optim.lr=0.1",
    "optim.eps=0.000001",
    "optim.weight_decay=0.05",
    "optim.min_lr=0.0000001",
    "optim.clip_grad=0.5",
    "optim.scheduler=linear",
    "optim.warmup_ratio=0.2",
)


def _error(call, *args) -> str:
    try:
        call(*args)
    except DataFileError as err:
        return str(err)
    raise AssertionError(f"{call.__name__}{args} raised nothing")


def test_a_directory_of_many_data_files_names_four_and_counts_the_rest(tmp_path):
    for index in range(6):
        (tmp_path / f"part-{index}.jsonl").write_text('{"text": "x"}\n')
    said = _error(check_data_file, tmp_path)
    named = " ".join(f"--input {tmp_path / f'part-{index}.jsonl'}" for index in range(4))
    assert said.endswith(f"one --input each: {named} (+2 more)"), said


def test_verl_keys_filled_in_are_named_four_then_counted():
    notes = [n for n in convert_verl(GENERATED).notes if "references to other keys" in n]
    assert len(notes) == 1, notes
    assert re.match(r"([^ ,]+, ){3}[^ ,]+ \(\+\d+ more\): \$\{\.\.\.\} references", notes[0]), notes


def test_a_resume_with_many_changed_settings_names_six_and_counts_the_rest(tmp_path, capsys):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run = tmp_path / "run"
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=4", "trainer.stop_at_step=2"))
    capsys.readouterr()
    run_sft(tiny_config(data, run, *SETTINGS, "trainer.total_steps=4", *CHANGED))
    err = capsys.readouterr().err
    listed = re.search(r"resumed with settings changed since step 2: ([^;]*);", err)
    assert listed is not None, err
    assert re.fullmatch(r"([^,]+, ){5}[^,]+ \(\+1 more\)", listed.group(1)), listed.group(1)
