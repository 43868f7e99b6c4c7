"""validate --json names the whole path of a finding's file, where that path holds ": "
(legal on Linux: a run dir "runs: 2", an HF dir "hf: given").

Three checks cut the error they caught at its first ": " to part the file from the message:
the files export copies (`asset_checks`), a tokenizer past the rows the run built and an
unreadable Megatron-Bridge record (`config_checks`). --json's `where` was then the path cut
short ("…/runs") and its `message` began with the rest of it ("2/run/…")."""

from __future__ import annotations

import copy
import json
import os
import shutil

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import (
    bridge_run,
    megatron_args,
    megatron_run,
    word_level_tokenizer,
)
from tests.support.paths import FIXTURES

COLON = "runs: 2"  # a dir name holding ": "


def _errors(*args) -> list[dict]:
    """The error findings of `mfsdp ckpt validate ARGS --json`, which must fail (exit 1)."""
    code, stdout, err = run_cli("ckpt", "validate", *args, "--json")
    assert code == 1 and stdout, stdout + err
    return [f for f in json.loads(stdout)["findings"] if f["severity"] == "error"]


def _one_at(errors: list[dict], where: str, starts: str) -> None:
    """Exactly one error is at the whole path `where`, its message starting with `starts`."""
    mine = [f for f in errors if f["where"] == where]
    assert len(mine) == 1 and mine[0]["message"].startswith(starts), (where, errors)


def test_a_file_export_copies_is_named_by_its_whole_path(tmp_path):
    run = shutil.copytree(FIXTURES / "megatron_fsdp_qwen2" / "run", tmp_path / COLON / "run")
    fifo = run / "global_step_2" / "huggingface" / "chat_template.jinja"
    os.mkfifo(fifo)
    _one_at(_errors(run), str(fifo), "a FIFO, not a regular file")


def test_an_unreadable_bridge_record_is_named_by_its_whole_path(tmp_path):
    run = bridge_run(tmp_path / COLON, tiny_causal_lm("llama", vocab=64), steps=(10,))
    config = run / "iter_0000010" / "run_config.yaml"
    config.write_text("bad: 1\nbad: 2\n" + config.read_text())
    _one_at(_errors(run), str(config), "key 'bad' given twice (line 2)")


def test_a_tokenizer_past_the_rows_is_named_by_its_whole_path(tmp_path):
    model = tiny_causal_lm("qwen2", vocab=128)
    args = megatron_args(
        model, padded_vocab_size=128, make_vocab_size_divisible_by=128, tensor_model_parallel_size=1
    )
    run = megatron_run(tmp_path, model, args)
    given = tmp_path / "hf: given"
    config = copy.deepcopy(model.config)
    config.vocab_size = 256  # more than the 128 rows: the tokenizer must fit the rows
    config.save_pretrained(given)
    word_level_tokenizer(given, 200)
    tokenizer = str(given / "tokenizer.json")
    _one_at(_errors(run, "--hf-config", given), tokenizer, "token id 199, past the 128 rows")
