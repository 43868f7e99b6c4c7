"""Vocabulary padding as the checkpoint's record states it.

Megatron pads vocab_size to a multiple of make_vocab_size_divisible_by times the
tensor-parallel size. Without that record export guesses (any power of two up to 128 times
up to 64); with it, the guess let 256 rows pass under a config of 100 tokens as "padding"
(d = 256) and dropped 156 rows, exit 0, where the run padded by 128: 256 rows are a
tokenizer of 129 to 256 tokens, and rows 100 to 255 real ones. Where the record holds the
rule, only its row count is accepted, by export and validate alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from mfsdp_ckpt.convert.vocab_padding import RecordedPadding, vocab_rows_problem
from tests.support.export import logits_of
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import (
    bridge_run,
    megatron_args,
    megatron_run,
    source_logits,
)

VOCAB = 100
EMBEDDING = "[model.module.embedding.word_embeddings.weight]"


@pytest.mark.parametrize(
    ("multiple", "vocab", "rows", "ok"),
    [
        (128, 100, 128, True),
        (128, 100, 256, False),  # the guess takes it (d = 256)
        (256, 100, 256, True),  # 128 x TP 2
        (128, 128, 128, True),
        (128, 129, 256, True),
        (1, 100, 100, True),  # Megatron-Bridge without should_pad_vocab
        (1, 100, 128, False),
    ],
)
def test_the_recorded_rule_is_megatrons_vocab_size_with_padding(multiple, vocab, rows, ok):
    recorded = RecordedPadding(multiple, "the record")
    assert (vocab_rows_problem(rows, vocab, recorded) is None) == ok
    assert vocab_rows_problem(rows, vocab) is None  # all of them pass the guess


def _config_dir(model, target: Path) -> Path:
    model.config.save_pretrained(target)
    return target


def _megatron(tmp_path: Path, rows: int, **recorded):
    model = tiny_causal_lm("llama", vocab=VOCAB)
    args = megatron_args(model, **{"padded_vocab_size": rows, **recorded})
    return model, megatron_run(tmp_path, model, args, rows=rows)


def test_rows_the_recorded_padding_does_not_make_are_refused(tmp_path):
    """Was: exit 0, "dropped 156 rows of Megatron's vocabulary padding". Args without
    padded_vocab_size (which, recorded, states the rows: test_interop_vocab_rows_stated)."""
    model, run = _megatron(
        tmp_path,
        256,
        make_vocab_size_divisible_by=128,
        tensor_model_parallel_size=1,
        padded_vocab_size=None,
    )
    given = _config_dir(model, tmp_path / "given")
    out = tmp_path / "hf"
    code, _, err = run_cli("ckpt", "export-hf", run, "--hf-config", given, "--out", out)
    line = one_error_line(err)
    assert code == 2 and EMBEDDING in line and "256 rows" in line, err  # --hf-config's fault
    assert "make_vocab_size_divisible_by=128 x tensor_model_parallel_size=1" in line
    assert "vocab_size 100 to 128 rows" in line and not out.exists()
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", given)
    assert code == 1 and EMBEDDING in stdout and "to 128 rows" in stdout, stdout + err


@pytest.mark.parametrize(("rows", "ranks"), [(128, 1), (256, 2)])
def test_rows_the_recorded_padding_makes_export(rows, ranks, tmp_path):
    model, run = _megatron(
        tmp_path, rows, make_vocab_size_divisible_by=128, tensor_model_parallel_size=ranks
    )
    given = _config_dir(model, tmp_path / "given")
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", given)
    assert code == 0, stdout + err
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--hf-config", given, "--out", out)
    assert code == 0 and f"dropped {rows - VOCAB} rows" in err, stdout + err
    ids, expected = source_logits(model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)


def test_a_record_that_does_not_pad_leaves_the_guess(tmp_path):
    """pad_vocab_size false: Megatron-LM took the padded size from elsewhere."""
    model, run = _megatron(
        tmp_path,
        256,
        make_vocab_size_divisible_by=128,
        tensor_model_parallel_size=1,
        pad_vocab_size=False,
    )
    given = _config_dir(model, tmp_path / "given")
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", given)
    assert code == 0, stdout + err


def test_the_derived_config_is_held_to_the_rule_too(tmp_path):
    """No --hf-config: the config comes from the record, vocab_size 100 with it."""
    _, run = _megatron(
        tmp_path,
        256,
        make_vocab_size_divisible_by=128,
        tensor_model_parallel_size=1,
        vocab_size=VOCAB,
        padded_vocab_size=None,
    )
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 1 and EMBEDDING in one_error_line(err), err
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 1 and "to 128 rows" in stdout, stdout + err


@pytest.mark.parametrize(("should_pad", "rows", "ok"), [(True, 128, True), (False, 128, False)])
def test_bridge_pads_only_with_should_pad_vocab(should_pad, rows, ok, tmp_path):
    model = tiny_causal_lm("llama", vocab=VOCAB)
    run = bridge_run(tmp_path, model, steps=(10,), rows=rows)
    run_config = run / "iter_0000010" / "run_config.yaml"
    data = yaml.safe_load(run_config.read_text())
    data["model"] |= {"should_pad_vocab": should_pad, "tensor_model_parallel_size": 1}
    run_config.write_text(yaml.safe_dump(data))
    code, stdout, err = run_cli("ckpt", "validate", run, "--json")
    report = json.loads(stdout)
    assert (code == 0) == ok and report["valid"] == ok, stdout + err
    if not ok:
        assert "should_pad_vocab=False" in json.dumps(report["findings"]), stdout
