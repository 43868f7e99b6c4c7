"""A Megatron-LM checkpoint whose `args` is the Namespace Megatron-LM's own `parse_args()`
makes (tests/fixtures/megatron_lm_args: ~850 settings, Megatron-core enums, torch dtypes,
`exit_signal = signal.SIGTERM`), beside the tiny Qwen2's weights, padded to 512 rows.

Was: every command refused it ("refusing global signal.Signals: a checkpoint's args never
name it"; validate called its pickle one that runs code), so no record check ran either.
Now validate (and --deep), inspect, export-hf and training from it read the record, and a
--hf-config of another head layout is still refused by it.
"""

from __future__ import annotations

import importlib.util
import json
import signal

import pytest

from tests.support.cli_errors import error_prefixed_lines
from tests.support.hf_model_files import changed_config_dir
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import assert_exports_to_source, run_cli
from tests.support.megatron_checkpoints import STEP, megatron_run
from tests.support.paths import FIXTURES


def _fixture_module():
    path = FIXTURES / "megatron_lm_args" / "make_megatron_lm_args.py"
    spec = importlib.util.spec_from_file_location("make_megatron_lm_args", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ARGS = _fixture_module()


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """The model, and its Megatron-LM run dir saved with the real Namespace and Adam state."""
    root = tmp_path_factory.mktemp("real_args")
    model = tiny_causal_lm("qwen2", vocab=ARGS.VOCAB)
    with ARGS.megatron_lm_args() as args:
        assert args.exit_signal is signal.SIGTERM  # what makes it Megatron-LM's own
        run = megatron_run(root, model, args, rows=ARGS.PADDED_VOCAB, optimizer=True)
    return model, run


@pytest.mark.parametrize("deep", [False, True])
def test_validate_passes_with_no_line_on_its_pickles(real_run, deep):
    _model, run = real_run
    code, stdout, err = run_cli("ckpt", "validate", run, *(["--deep"] if deep else []))
    assert code == 0 and stdout.startswith("valid: "), stdout + err
    assert "Adam optimizer state" in stdout, stdout
    assert "warning:" not in stdout + err and not error_prefixed_lines(stdout + err), err


def test_inspect_reads_the_model_from_the_namespace(real_run):
    _model, run = real_run
    code, stdout, err = run_cli("ckpt", "inspect", run, "--json")
    assert code == 0, stdout + err
    (entry,) = [o for o in json.loads(stdout)["objects"] if o["name"] == "args"]
    assert entry["kind"] == "Namespace" and entry["not_decoded"] is None, entry
    code, stdout, err = run_cli("ckpt", "inspect", run)
    (line,) = [line for line in stdout.splitlines() if line.startswith("model ")]
    assert "Qwen2ForCausalLM, 2 layers, hidden 128, vocab 500 (from " in line, line
    assert f"iter_{STEP:07d} [args]" in line, line


def test_export_derives_the_config_and_gives_the_source_logits(real_run, tmp_path):
    model, run = real_run
    out = tmp_path / "hf"
    err = assert_exports_to_source(model, run, out, "--dtype", "fp32")
    assert "dropped 12 rows of Megatron's vocabulary padding (512 stored, vocab_size 500)" in err
    config = json.loads((out / "config.json").read_text())
    expected = model.config.to_dict()
    for key in ("num_key_value_heads", "hidden_size", "intermediate_size", "rms_norm_eps"):
        assert config[key] == expected[key], key
    assert config["tie_word_embeddings"] is True and config["vocab_size"] == ARGS.VOCAB


def test_a_config_of_another_head_layout_is_refused_by_the_record(real_run, tmp_path):
    """The record checks run: a --hf-config of 4 KV groups (the Namespace records 2), which
    would export q/k/v scrambled, is refused naming the setting."""
    model, run = real_run
    config = changed_config_dir(model, tmp_path / "cfg", num_key_value_heads=4)
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--hf-config", config, "--out", tmp_path / "hf"
    )
    errors = error_prefixed_lines(err)
    assert code == 2 and len(errors) == 1, stdout + err
    assert "num_key_value_heads" in errors[0] and "[args]" in errors[0], errors[0]


def test_training_from_it_starts_as_from_its_export(real_run, tmp_path):
    """`mfsdp train` with model.path= the run: its first step is the export's."""
    from tests.support.sft import first_loss, write_chat_jsonl
    from trainer.tiny import build_tokenizer

    _model, run = real_run
    export = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", export, "--dtype", "fp32")
    assert code == 0, stdout + err
    build_tokenizer(ARGS.VOCAB).save_pretrained(tmp_path / "tokenizer")
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=24)
    tokenizer = f"model.tokenizer={tmp_path / 'tokenizer'}"
    from_run = first_loss(data, tmp_path / "a", f"model.path={run}", tokenizer)
    assert from_run == first_loss(data, tmp_path / "b", f"model.path={export}", tokenizer)
