"""The vocabulary rows a record states, as each kind of record states them.

Two kinds of legitimate checkpoints were refused by the recorded-padding check:

* verl with Megatron-Bridge building the model (use_mbridge) writes transformer_config.json
  as asdict() of Bridge's provider: should_pad_vocab false, so its rows are vocab_size
  exactly, beside a make_vocab_size_divisible_by and tensor_model_parallel_size that pad
  nothing. It was held to Megatron-LM's rule (ceil(V / (d * tp)) * d * tp): exit 1.
  A verl transformer_config.json without should_pad_vocab (Megatron-core's
  TransformerConfig) states no padding at all, and is left to the guess.
* Megatron-LM pads only when padded_vocab_size is unset, and --use-checkpoint-args carries
  it over from a checkpoint converted at another tensor-parallel size: its rows are the
  stated padded_vocab_size, not the run's own d * tp padding. They were refused against the
  checkpoint's own record: exit 1.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from mfsdp_ckpt.convert.vocab_padding import RecordedPadding, vocab_rows_problem
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import assert_exports_to_source, one_error_line, run_cli
from tests.support.megatron_checkpoints import (
    megatron_args,
    megatron_run,
    verl_bridge_run,
    word_level_tokenizer,
)

VOCAB = 100
EMBEDDING = "[model.module.embedding.word_embeddings.weight]"


def _exports_and_validates(model, run: Path, tmp_path: Path, *args) -> str:
    code, stdout, err = run_cli("ckpt", "validate", run, *args)
    assert code == 0, stdout + err
    return assert_exports_to_source(model, run, tmp_path / "hf", *args)


@pytest.mark.parametrize(
    ("vocab", "ranks"),
    [(VOCAB, 2), (151, 4)],  # Bridge's divisible-by: 4 for 100, 1 for an odd vocabulary
)
def test_verl_of_a_bridge_model_holds_vocab_size_rows(vocab, ranks, tmp_path):
    """Was: exit 1, "100 rows, but the run's padding (... x tensor_model_parallel_size=2
    ...) pads the config's vocab_size 100 to 104 rows"."""
    model = tiny_causal_lm("qwen2", vocab=vocab)
    divisor = next(d for d in (128, 64, 32, 16, 8, 4, 2, 1) if vocab % d == 0)
    run = verl_bridge_run(
        tmp_path, model, make_vocab_size_divisible_by=divisor, tensor_model_parallel_size=ranks
    )
    _exports_and_validates(model, run, tmp_path)


@pytest.mark.parametrize(("rows", "ok"), [(104, True), (VOCAB, False)])
def test_verl_of_a_bridge_model_that_pads_is_held_to_the_rule(rows, ok, tmp_path):
    model = tiny_causal_lm("qwen2", vocab=VOCAB)
    run = verl_bridge_run(
        tmp_path,
        model,
        rows=rows,
        should_pad_vocab=True,
        make_vocab_size_divisible_by=4,
        tensor_model_parallel_size=2,
    )
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert (code == 0) == ok, stdout + err
    if not ok:
        assert "should_pad_vocab" not in stdout and "to 104 rows" in stdout, stdout


@pytest.mark.parametrize("rows", [VOCAB, 128])
def test_verl_without_a_padding_flag_is_left_to_the_guess(rows, tmp_path):
    """Megatron-core's TransformerConfig knows no vocabulary padding: its numbers there are
    no rule Megatron-LM's args state. Was: exit 1 ("pads ... to 256 rows")."""
    model = tiny_causal_lm("qwen2", vocab=VOCAB)
    run = verl_bridge_run(
        tmp_path,
        model,
        rows=rows if rows != VOCAB else None,
        should_pad_vocab=None,
        make_vocab_size_divisible_by=128,
        tensor_model_parallel_size=2,
    )
    _exports_and_validates(model, run, tmp_path)


@pytest.mark.parametrize(("vocab", "rows"), [(128, 128), (VOCAB, 128)])
def test_megatron_lm_rows_are_its_padded_vocab_size(vocab, rows, tmp_path):
    """padded_vocab_size 128 kept from a checkpoint converted at one tensor-parallel rank,
    trained at two (d * tp = 256). Was: exit 1, "128 rows, but the run's padding
    (make_vocab_size_divisible_by=128 x tensor_model_parallel_size=2 ...) pads ... to 256"."""
    model = tiny_causal_lm("llama", vocab=vocab)
    args = megatron_args(
        model,
        padded_vocab_size=rows,
        vocab_size=vocab,
        make_vocab_size_divisible_by=128,
        tensor_model_parallel_size=2,
    )
    run = megatron_run(tmp_path, model, args, rows=rows if rows != vocab else None)
    note = _exports_and_validates(model, run, tmp_path)
    assert (f"dropped {rows - vocab} rows" in note) == (rows != vocab), note


def test_megatron_lm_rows_other_than_its_padded_vocab_size_are_refused(tmp_path):
    model = tiny_causal_lm("llama", vocab=VOCAB)
    args = megatron_args(
        model, padded_vocab_size=128, make_vocab_size_divisible_by=128, tensor_model_parallel_size=1
    )
    run = megatron_run(tmp_path, model, args, rows=256)
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and EMBEDDING in line, err
    assert "256 rows, but the run built 128 (padded_vocab_size=128 in" in line


def test_a_stated_padded_size_still_explains_its_excess_as_padding():
    """The rows a record states past vocab_size are padding only as Megatron pads (the
    guess): a config of far fewer tokens is another model's."""
    stated = RecordedPadding(None, "padded_vocab_size=4000 in the record", 4000)
    assert vocab_rows_problem(4000, 3990, stated) is None  # by 16 (or 32)
    problem = vocab_rows_problem(4000, VOCAB, stated)
    assert problem is not None and "does not explain" in problem


def test_a_tokenizers_rows_kept_from_another_tensor_parallel_size_export(tmp_path):
    """Megatron-LM's padded_vocab_size 128 (a tokenizer of 100, padded at one rank) under a
    config of 256, trained at two ranks. Was: exit 1, "fewer than the config's vocab_size"."""
    model = tiny_causal_lm("qwen2", vocab=128)
    args = megatron_args(
        model, padded_vocab_size=128, make_vocab_size_divisible_by=128, tensor_model_parallel_size=2
    )
    run = megatron_run(tmp_path, model, args)
    given = tmp_path / "given"
    config = copy.deepcopy(model.config)
    config.vocab_size = 256
    config.save_pretrained(given)
    word_level_tokenizer(given, VOCAB)
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--hf-config", given, "--out", out)
    assert code == 0 and "config.json vocab_size 128, not 256" in err, stdout + err
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 128
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", given)
    assert code == 0, stdout + err
