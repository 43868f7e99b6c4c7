"""Megatron-LM and Megatron-Bridge checkpoints export without --hf-config.

Megatron-LM's fsdp_dtensor checkpoint records its model only in `args`, a pickled
argparse.Namespace that also holds dtypes, enums and partials of code this process has not
imported; Megatron-Bridge records it in `run_config.yaml` and keeps its tokenizer in the
iteration dir. Both are built on CPU with torch DCP (tests/support/megatron_checkpoints.py)
from a tiny transformers model whose weights are written under Megatron-core names by
tests/support/hf_to_mcore.py's independent converter, so the exported model's logits can be
compared with the source's.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format import checkpoint_resolution, layout
from mfsdp_ckpt.format.restricted_pickle import Placeholder, PlaceholderCall
from mfsdp_ckpt.format.saved_objects import load_namespace
from tests.support.export import load_report, logits_of
from tests.support.hf_model_files import changed_config_dir
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import (
    STEP,
    AttnBackend,
    bridge_run,
    megatron_args,
    megatron_run,
    source_logits,
    train_state,
)


# --------------------------------------------------------------------------- Megatron-LM
@pytest.mark.parametrize("family", ["qwen2", "qwen3", "llama"])
def test_megatron_lm_exports_from_its_args_to_the_source_logits(family, tmp_path):
    """Was: exit 2, "pass --hf-config" (Megatron-LM saves no Hugging Face config)."""
    model = tiny_causal_lm(family)
    run = megatron_run(tmp_path, model, megatron_args(model))
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    assert code == 0, stdout + err
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == family and config["architectures"] == [type(model).__name__]
    assert f"config.json derived from {run / f'iter_{STEP:07d}'} [args]" in err, err
    assert "no tokenizer written" in err and "/models/never-read-tokenizer" in err, err
    assert not any(p.name.startswith("tokenizer") for p in out.iterdir())
    assert load_report(out) == {}
    ids, expected = source_logits(model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)


def test_args_objects_of_unknown_classes_stay_names(tmp_path):
    """The enum, dtype and partial in args are read as their names: the classes are
    neither imported nor called. A module that records its own import proves it."""
    marker = tmp_path / "imported.txt"
    (tmp_path / "args_marker_module.py").write_text(
        "import enum, pathlib\n"
        f"pathlib.Path({str(marker)!r}).open('a').write('imported\\n')\n"
        "class Kind(enum.Enum):\n    encoder_or_decoder = 1\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import args_marker_module  # type: ignore[import-not-found]

        kind = args_marker_module.Kind.encoder_or_decoder
        model = tiny_causal_lm("llama")
        run = megatron_run(tmp_path, model, megatron_args(model, model_type=kind))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("args_marker_module", None)
    assert marker.read_text() == "imported\n"
    fields = _args_fields(run / f"iter_{STEP:07d}")
    assert fields["params_dtype"] == Placeholder("torch", "float32")
    backend = fields["attention_backend"]
    assert isinstance(backend, PlaceholderCall) and backend.args == (5,)
    assert backend.target == Placeholder(AttnBackend.__module__, "AttnBackend")
    assert fields["model_type"].target == Placeholder("args_marker_module", "Kind")
    assert fields["init_method"].target == Placeholder("functools", "partial")
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 0, stdout + err
    assert "args_marker_module" not in sys.modules and marker.read_text() == "imported\n"


def _args_fields(dist: Path) -> dict:
    from mfsdp_ckpt.convert.megatron_record import read_args
    from mfsdp_ckpt.storage.reader import CheckpointReader

    return read_args(CheckpointReader(dist))


UNMAPPABLE = {
    "normalization": ("LayerNorm", "normalization='LayerNorm'"),
    "position_embedding_type": ("learned_absolute", "position_embedding_type='learned_absolute'"),
    "swiglu": (False, "swiglu=False"),
    "rotary_percent": (0.5, "rotary_percent=0.5"),
    "add_bias_linear": (True, "add_bias_linear=True"),
}


@pytest.mark.parametrize("arg", list(UNMAPPABLE))
def test_args_of_a_model_no_family_computes_are_refused_naming_the_arg(arg, tmp_path):
    value, words = UNMAPPABLE[arg]
    model = tiny_causal_lm("llama")
    run = megatron_run(tmp_path, model, megatron_args(model, **{arg: value}))
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and words in line and "[args]" in line, stdout + err
    assert not (tmp_path / "hf").exists()


class _RunsACommand:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_args_whose_pickle_calls_os_system_are_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    model = tiny_causal_lm("llama")
    run = megatron_run(tmp_path, model, megatron_args(model, hook=_RunsACommand(marker)))
    assert not marker.exists()
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and "[args]" in line and "system" in line, stdout + err
    assert not marker.exists() and not (tmp_path / "hf").exists()
    code, stdout, err = run_cli("ckpt", "inspect", run)
    assert code == 0 and not marker.exists(), stdout + err


def test_only_the_padded_vocab_is_known_so_the_padding_rows_are_kept(tmp_path):
    model = tiny_causal_lm(
        "llama", vocab=500
    )  # padded to 512 as --make-vocab-size-divisible-by 128
    args = megatron_args(model, padded_vocab_size=512, vocab_size=None)
    run = megatron_run(tmp_path, model, args, rows=512)
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    assert code == 0, stdout + err
    assert "padded_vocab_size=512 but no vocab_size: all 512 rows are kept" in err, err
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 512
    ids, expected = source_logits(model)
    torch.testing.assert_close(logits_of(out, ids)[..., :500], expected, rtol=0, atol=1e-5)


def test_a_known_vocab_size_drops_the_padding_rows(tmp_path):
    model = tiny_causal_lm("llama", vocab=500)
    run = megatron_run(
        tmp_path, model, megatron_args(model, padded_vocab_size=512, vocab_size=500), rows=512
    )
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    assert code == 0 and "dropped 12 rows of Megatron's vocabulary padding" in err, stdout + err
    ids, expected = source_logits(model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)


def test_hf_config_wins_over_the_args_and_says_so(tmp_path):
    """Args with rope scaling: the --hf-config that states it is used, and
    export says so. (A setting no config computes, LayerNorm, is refused either way.)"""
    model = tiny_causal_lm("qwen2")
    run = megatron_run(tmp_path, model, megatron_args(model, use_rope_scaling=True))
    theta = model.config.rope_parameters["rope_theta"]
    llama3 = {"rope_type": "llama3", "rope_theta": theta, "factor": 8.0, "low_freq_factor": 1.0}
    llama3.update(high_freq_factor=4.0, original_max_position_embeddings=8192)
    changed_config_dir(model, tmp_path / "assets", rope_parameters=llama3)
    out = tmp_path / "hf"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--hf-config", tmp_path / "assets", "--out", out
    )
    assert code == 0 and f"config.json from --hf-config {tmp_path / 'assets'}" in err, stdout + err


def test_args_lacking_the_sizes_ask_for_hf_config_naming_them(tmp_path):
    model = tiny_causal_lm("llama")
    args = megatron_args(model)
    del args.num_attention_heads, args.ffn_hidden_size
    run = megatron_run(tmp_path, model, args)
    code, _out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 2 and "args lacks num_attention_heads, ffn_hidden_size" in line, err
    assert "pass --hf-config" in line


# --------------------------------------------------------------------------- Megatron-Bridge
@pytest.mark.parametrize("family", ["qwen2", "qwen3", "llama"])
def test_a_bridge_run_dir_resolves_and_exports_with_its_tokenizer(family, tmp_path):
    from transformers import AutoTokenizer

    model = tiny_causal_lm(family, vocab=500)
    run = bridge_run(tmp_path, model, rows=512)
    paths = checkpoint_resolution.resolve_checkpoint(run)
    assert paths.kind == layout.MEGATRON_BRIDGE and paths.step == 20
    assert (
        checkpoint_resolution.resolve_checkpoint(run / "iter_0000010").kind
        == layout.MEGATRON_BRIDGE
    )
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    assert code == 0, stdout + err
    assert f"config.json derived from {run / 'iter_0000020' / 'run_config.yaml'} model" in err
    assert "dropped 12 rows" in err and "no tokenizer" not in err, err
    saved = run / "iter_0000020" / "tokenizer"
    for file in saved.iterdir():  # Bridge's tokenizer files, copied unchanged
        assert (out / file.name).read_bytes() == file.read_bytes()
    assert AutoTokenizer.from_pretrained(out).get_vocab()["w7"] == 7
    assert load_report(out) == {}
    ids, expected = source_logits(model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)
    code, stdout, err = run_cli("ckpt", "validate", run, "--json")
    report = json.loads(stdout)
    assert code == 0 and report["layout"] == "megatron-bridge" and report["step"] == 20, stdout


def test_bridge_reads_latest_train_state_before_the_text_tracker(tmp_path):
    """Megatron-Bridge resumes from latest_train_state.pt and falls back to the .txt."""
    run = bridge_run(tmp_path, tiny_causal_lm("llama"))
    (run / "latest_checkpointed_iteration.txt").write_text("10")
    assert checkpoint_resolution.resolve_checkpoint(run).step == 20
    torch.save(train_state(10), run / "latest_train_state.pt")
    assert checkpoint_resolution.resolve_checkpoint(run).step == 10


def test_a_bridge_tracker_that_is_not_a_train_state_is_exit_1(tmp_path):
    run = bridge_run(tmp_path, tiny_causal_lm("llama"), steps=(10,))
    (run / "latest_train_state.pt").write_bytes(b"not a zip")
    code, stdout, err = run_cli("ckpt", "validate", run)
    line = one_error_line(stdout)  # validate's finding: an invalid checkpoint
    assert code == 1 and "latest_train_state.pt" in line and "iter_0000010" in line, stdout + err


def test_bridge_torch_dist_dirs_are_still_named_as_what_reads_them(tmp_path):
    run = tmp_path / "bridge"
    it = run / "iter_0000020"
    it.mkdir(parents=True)
    (it / "metadata.json").write_text('{"sharded_backend": "torch_dist"}')
    (it / "common.pt").write_bytes(b"")
    torch.save(train_state(20), it / "train_state.pt")
    torch.save(train_state(20), run / "latest_train_state.pt")
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 2 and "torch_dist" in line and "Megatron-Bridge read it" in line, stdout + err


def test_namespace_loader_refuses_what_is_not_a_namespace():
    import io

    buffer = io.BytesIO()
    torch.save({"num_layers": 2}, buffer)
    with pytest.raises(CheckpointFormatError, match=r"not an argparse\.Namespace"):
        load_namespace(buffer.getvalue(), "args")


def test_validate_checks_the_weights_against_the_args_without_hf_config(tmp_path):
    """Was: without --hf-config, validate checked no shape of a Megatron-LM checkpoint."""
    model = tiny_causal_lm("qwen2")
    good = megatron_run(tmp_path / "good", model, megatron_args(model))
    code, stdout, err = run_cli("ckpt", "validate", good, "--json")
    assert code == 0 and json.loads(stdout)["findings"] == [], stdout + err
    wrong = megatron_run(tmp_path / "wrong", model, megatron_args(model, ffn_hidden_size=64))
    code, stdout, err = run_cli("ckpt", "validate", wrong)
    assert code == 1 and "[args]" in stdout and "do not fit" in stdout, stdout + err


def test_validate_refuses_args_whose_pickle_calls_os_system(tmp_path):
    marker = tmp_path / "ran"
    model = tiny_causal_lm("llama")
    run = megatron_run(tmp_path, model, megatron_args(model, hook=_RunsACommand(marker)))
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 1 and "system" in stdout and "[args]" in stdout, stdout + err
    assert not marker.exists()


def test_inspect_shows_the_model_the_args_record(tmp_path):
    model = tiny_causal_lm("qwen3")
    run = megatron_run(tmp_path, model, megatron_args(model))
    code, stdout, err = run_cli("ckpt", "inspect", run)
    assert code == 0 and "model       Qwen3ForCausalLM, 2 layers, hidden 128" in stdout, stdout
    code, stdout, err = run_cli("ckpt", "inspect", run, "--json")
    recorded = json.loads(stdout)["recorded_model"]
    assert recorded["config"]["head_dim"] == 48 and recorded["source"].endswith("[args]")
    hostile = megatron_run(
        tmp_path / "hostile", model, megatron_args(model, hook=_RunsACommand(tmp_path / "ran"))
    )
    code, stdout, err = run_cli("ckpt", "inspect", hostile, "--json")
    problem = json.loads(stdout)["recorded_model"]["problem"]
    assert code == 0 and "system" in problem and not (tmp_path / "ran").exists(), stdout + err
