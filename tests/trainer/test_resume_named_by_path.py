"""A resume from a step dir without manifest.json (copied out of another run, then read as
a bare dist_ckpt) names the checkpoint by its path.

Was: "resumed from None", "None is at step 2 and trainer.total_steps=2: nothing left to
train" and a result "checkpoint None": the lines printed the step dir, which a bare
dist_ckpt has none of.
"""

from __future__ import annotations

import shutil

from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft

SETTINGS = ("data.global_batch_size=8", "data.max_tokens_per_micro_batch=256")


def test_a_copied_step_without_manifest_is_named_by_its_path(tmp_path, capsys):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    run_sft(tiny_config(data, tmp_path / "run", *SETTINGS, "trainer.total_steps=2"))
    copied = tmp_path / "S2"
    shutil.copytree(tmp_path / "run" / "global_step_2", copied)
    (copied / "manifest.json").unlink()
    capsys.readouterr()
    resume = f"checkpoint.resume={copied}"
    done = run_sft(tiny_config(data, tmp_path / "r2", *SETTINGS, "trainer.total_steps=2", resume))
    err = capsys.readouterr().err
    assert f"; {copied} is at step 2 and trainer.total_steps=2" in err and "None" not in err, err
    assert done.last_checkpoint == copied
    run_sft(tiny_config(data, tmp_path / "r3", *SETTINGS, "trainer.total_steps=3", resume))
    err = capsys.readouterr().err
    assert f"steps 2 -> 3 (resumed from {copied})" in err, err
