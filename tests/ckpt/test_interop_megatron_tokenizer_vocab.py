"""A Megatron-LM run whose rows cover its tokenizer but not the config's vocab_size.

Megatron-LM with `--tokenizer-type HuggingFaceTokenizer` pads len(tokenizer) (Qwen2.5's
151665) to a multiple of make_vocab_size_divisible_by x tensor_model_parallel_size
(151680) and records it as padded_vocab_size, while Qwen2.5's config.json says vocab_size
151936. Scaled down with the same arithmetic: a tokenizer of 100 tokens, 128 rows, a
config of 256. Was: export-hf and validate refused the config (exit 1, "fewer than the
config's vocab_size"); Megatron-Bridge writes the 128-row tensors under the config's 256,
which transformers cannot load. Now the export's config.json says vocab_size 128, with a
note, and gives the source model's logits; validate accepts it. A tokenizer with ids past
the rows, or rows the record does not state, are still refused.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

from mfsdp_ckpt.convert.recorded_vocab import too_many_tokens
from mfsdp_ckpt.convert.vocab_padding import RecordedPadding, vocab_rows_problem
from tests.support.export import load_report, logits_of
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import (
    megatron_args,
    megatron_run,
    source_logits,
    word_level_tokenizer,
)

ROWS, CONFIG_VOCAB, TOKENS = 128, 256, 100
EMBEDDING = "[model.module.embedding.word_embeddings.weight]"


def _run(tmp_path, tokens: int = TOKENS, **recorded):
    """Megatron-LM's save of a model of ROWS rows (its tokenizer's `tokens` padded by 128),
    and the Hugging Face dir of the model it started from: config vocab_size CONFIG_VOCAB
    and that tokenizer."""
    model = tiny_causal_lm("qwen2", vocab=ROWS)
    settings = dict(
        padded_vocab_size=ROWS, make_vocab_size_divisible_by=128, tensor_model_parallel_size=1
    )
    args = megatron_args(model, **{**settings, **recorded})
    run = megatron_run(tmp_path, model, args)
    given = tmp_path / "given"
    config = copy.deepcopy(model.config)
    config.vocab_size = CONFIG_VOCAB
    config.save_pretrained(given)
    word_level_tokenizer(given, tokens)
    return model, run, given


def test_export_writes_the_recorded_rows_as_vocab_size(tmp_path):
    model, run, given = _run(tmp_path)
    out = tmp_path / "hf"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--hf-config", given, "--out", out, "--verify"
    )
    assert code == 0, stdout + err
    assert f"config.json vocab_size {ROWS}, not {CONFIG_VOCAB}: the run built {ROWS}" in err
    assert json.loads((out / "config.json").read_text())["vocab_size"] == ROWS
    assert load_report(out) == {}
    ids, expected = source_logits(model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", given, "--deep")
    assert code == 0, stdout + err


def test_a_tokenizer_past_the_rows_is_refused(tmp_path):
    _, run, given = _run(tmp_path, tokens=200)
    out = tmp_path / "hf"
    code, _, err = run_cli("ckpt", "export-hf", run, "--hf-config", given, "--out", out)
    line = one_error_line(err)
    assert code == 1 and str(given / "tokenizer.json") in line and "token id 199" in line, err
    assert not out.exists()
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", given)
    assert code == 1 and "token id 199, past the 128 rows" in stdout, stdout + err


@pytest.mark.parametrize(
    ("recorded", "code", "words"),
    [
        (dict(padded_vocab_size=None), 2, "fewer than the config's vocab_size"),
        (dict(padded_vocab_size=256), 1, "the run built 256 (padded_vocab_size=256 in"),
        (dict(pad_vocab_size=False), 2, "fewer than the config's vocab_size"),
    ],
    ids=["none", "another", "not padded"],
)
def test_rows_the_record_does_not_state_are_refused_as_before(recorded, code, words, tmp_path):
    """Exit 2 where --hf-config's vocab_size is what the rows contradict; exit 1 where they
    contradict the rows the record states it built, whatever the config says."""
    _, run, given = _run(tmp_path, **recorded)
    found, _, err = run_cli("ckpt", "export-hf", run, "--hf-config", given, "--out", tmp_path / "o")
    line = one_error_line(err)
    assert found == code and EMBEDDING in line and words in line, err
    assert "vocab_size 128, not" not in err


def test_a_config_set_to_more_tokens_is_told_which_vocab_size_fits():
    """Where a config still names more tokens (model.overrides.vocab_size set by hand), the
    error names the vocab_size that fits."""
    recorded = RecordedPadding(128, "the record", rows=ROWS)
    problem = vocab_rows_problem(ROWS, CONFIG_VOCAB, recorded)
    assert problem is not None and "a config with vocab_size 128 holds them" in problem
    assert "model.overrides.vocab_size=128 sets it" in problem
    other = vocab_rows_problem(ROWS, CONFIG_VOCAB, RecordedPadding(128, "the record"))
    assert other is not None and "use the config the run trained with" in other


@pytest.mark.parametrize(
    ("tokenizer", "fits"),
    [
        ({"model": {"vocab": {"a": 0, "b": 127}}}, True),
        ({"model": {"vocab": {"a": 0}}, "added_tokens": [{"id": 128}]}, False),
        ({"model": {"vocab": [["a", 0.0]] * 129}}, False),  # Unigram: list positions are ids
        ({"model": {"vocab": [["a", 0.0]] * 128}}, True),
    ],
)
def test_token_ids_are_counted_from_tokenizer_json(tokenizer, fits, tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer))
    assert (too_many_tokens(tmp_path, tmp_path, ROWS) is None) is fits


@pytest.mark.parametrize(
    "text",
    [
        '{"model": {"vocab": {"a": 1}}, "x": ' + "[" * 200_000 + "]" * 200_000 + "}",
        '{"model": {"vocab": {"a": 1}}, "model": {"vocab": {"b": 900}}}',
    ],
)
def test_a_tokenizer_json_too_deep_or_giving_a_key_twice_is_left_to_the_asset_checks(
    tmp_path, text
):
    """Counted with plain json.loads, a tokenizer.json nested 200,000 deep raised Python's
    RecursionError (a traceback) and one giving `model` twice was counted by its last copy;
    read as every JSON asset is, both are left to the checks that name them."""
    (tmp_path / "tokenizer.json").write_text(text)
    assert too_many_tokens(tmp_path, tmp_path, rows=128) is None
