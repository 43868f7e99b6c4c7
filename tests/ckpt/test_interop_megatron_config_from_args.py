"""Megatron-LM and Megatron-Bridge checkpoints export without --hf-config.

Megatron-LM's fsdp_dtensor checkpoint records its model only in `args`, a pickled
argparse.Namespace that also holds dtypes, enums and partials of code this process has not
imported; Megatron-Bridge records it in `run_config.yaml` and keeps its tokenizer in the
iteration dir. Both are built here on CPU with torch DCP from a tiny transformers model
whose weights are written under Megatron-core names by test_export_mcore's independent
converter, so the exported model's logits can be compared with the source's.
"""

from __future__ import annotations

import argparse
import enum
import functools
import json
import os
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
import yaml

from mfsdp_ckpt.errors import CheckpointFormatError
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.format.restricted_pickle import Placeholder, PlaceholderCall
from mfsdp_ckpt.format.saved_objects import load_namespace
from tests.ckpt.convert.test_export_mcore import _hf_model, to_mcore
from tests.support.export import fixed_inputs, load_report, logits_of
from tests.support.interop_layouts import one_error_line, run_cli

STEP = 100


class AttnBackend(enum.Enum):
    """Stands in for megatron.core's enum of the same name, which args holds."""

    flash = 1
    auto = 5


def _megatron_args(model, **changes) -> argparse.Namespace:
    """The architecture part of Megatron-LM's Namespace for `model`, with the kinds of
    objects a real one holds beside plain values: a torch.dtype, an enum member, a partial."""
    config = model.config
    family = config.model_type
    settings = dict(
        ckpt_format="fsdp_dtensor",
        use_megatron_fsdp=True,
        num_layers=config.num_hidden_layers,
        hidden_size=config.hidden_size,
        ffn_hidden_size=config.intermediate_size,
        num_attention_heads=config.num_attention_heads,
        group_query_attention=True,
        num_query_groups=config.num_key_value_heads,
        kv_channels=getattr(config, "head_dim", None)
        or config.hidden_size // config.num_attention_heads,
        max_position_embeddings=config.max_position_embeddings,
        seq_length=64,
        rotary_base=config.rope_parameters["rope_theta"]
        if getattr(config, "rope_parameters", None)
        else config.rope_theta,
        norm_epsilon=config.rms_norm_eps,
        normalization="RMSNorm",
        swiglu=True,
        position_embedding_type="rope",
        rotary_percent=1.0,
        untie_embeddings_and_output_weights=not config.tie_word_embeddings,
        add_qkv_bias=family == "qwen2",
        qk_layernorm=family == "qwen3",
        add_bias_linear=False,
        num_experts=None,
        padded_vocab_size=config.vocab_size,
        vocab_size=None,
        params_dtype=torch.float32,
        bf16=False,
        fp16=False,
        attention_backend=AttnBackend.auto,
        init_method=functools.partial(torch.nn.init.normal_, mean=0.0, std=0.02),
        tokenizer_type="HuggingFaceTokenizer",
        tokenizer_model="/models/never-read-tokenizer",
    )
    settings.update(changes)
    return argparse.Namespace(**settings)


def _save(state: dict, target: Path) -> Path:
    with warnings.catch_warnings():  # DCP warns that it saves without a process group
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(target), no_dist=True)
    return target


def _mcore_weights(model, rows: int | None = None) -> dict[str, torch.Tensor]:
    weights = to_mcore(model, norms="local", fc1="split")
    if rows is not None:  # Megatron's vocabulary padding: extra rows no token reaches
        for name in ("embedding.word_embeddings.weight", "output_layer.weight"):
            if name in weights:
                extra = torch.randn(rows - weights[name].shape[0], weights[name].shape[1])
                weights[name] = torch.cat([weights[name], extra])
    return {f"module.{k}": v for k, v in weights.items()}


def _megatron_run(root: Path, model, args, rows: int | None = None) -> Path:
    run = root / "megatron"
    state = {
        "args": args,
        "checkpoint_version": 3.0,
        "iteration": STEP,
        "model": _mcore_weights(model, rows),
    }
    _save(state, run / f"iter_{STEP:07d}")
    (run / "latest_checkpointed_iteration.txt").write_text(str(STEP))
    return run


def _source_logits(model) -> tuple[torch.Tensor, torch.Tensor]:
    ids = fixed_inputs(model.config.vocab_size)
    with torch.no_grad():
        return ids, model(input_ids=ids).logits


# --------------------------------------------------------------------------- Megatron-LM
@pytest.mark.parametrize("family", ["qwen2", "qwen3", "llama"])
def test_megatron_lm_exports_from_its_args_to_the_source_logits(family, tmp_path):
    """Was: exit 2, "pass --hf-config" (Megatron-LM saves no Hugging Face config)."""
    model = _hf_model(family)
    run = _megatron_run(tmp_path, model, _megatron_args(model))
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    assert code == 0, stdout + err
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == family and config["architectures"] == [type(model).__name__]
    assert f"config.json derived from {run / f'iter_{STEP:07d}'} [args]" in err, err
    assert "no tokenizer written" in err and "/models/never-read-tokenizer" in err, err
    assert not any(p.name.startswith("tokenizer") for p in out.iterdir())
    assert load_report(out) == {}
    ids, expected = _source_logits(model)
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
        model = _hf_model("llama")
        run = _megatron_run(tmp_path, model, _megatron_args(model, model_type=kind))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("args_marker_module", None)
    assert marker.read_text() == "imported\n"
    fields = _args_fields(run / f"iter_{STEP:07d}")
    assert fields["params_dtype"] == Placeholder("torch", "float32")
    backend = fields["attention_backend"]
    assert isinstance(backend, PlaceholderCall) and backend.args == (5,)
    assert backend.target == Placeholder(__name__, "AttnBackend")
    assert fields["model_type"].target == Placeholder("args_marker_module", "Kind")
    assert fields["init_method"].target == Placeholder("functools", "partial")
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 0, stdout + err
    assert "args_marker_module" not in sys.modules and marker.read_text() == "imported\n"


def _args_fields(dist: Path) -> dict:
    from mfsdp_ckpt.convert.megatron_config import read_args
    from mfsdp_ckpt.storage.reader import CheckpointReader

    return read_args(CheckpointReader(dist))


UNMAPPABLE = {
    "normalization": ("LayerNorm", "normalization='LayerNorm'"),
    "num_experts": (8, "num_experts=8"),
    "position_embedding_type": ("learned_absolute", "position_embedding_type='learned_absolute'"),
    "swiglu": (False, "swiglu=False"),
    "rotary_percent": (0.5, "rotary_percent=0.5"),
    "add_bias_linear": (True, "add_bias_linear=True"),
}


@pytest.mark.parametrize("arg", list(UNMAPPABLE))
def test_args_of_a_model_no_family_computes_are_refused_naming_the_arg(arg, tmp_path):
    value, words = UNMAPPABLE[arg]
    model = _hf_model("llama")
    run = _megatron_run(tmp_path, model, _megatron_args(model, **{arg: value}))
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
    model = _hf_model("llama")
    run = _megatron_run(tmp_path, model, _megatron_args(model, hook=_RunsACommand(marker)))
    assert not marker.exists()
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and "[args]" in line and "system" in line, stdout + err
    assert not marker.exists() and not (tmp_path / "hf").exists()
    code, stdout, err = run_cli("ckpt", "inspect", run)
    assert code == 0 and not marker.exists(), stdout + err


def test_only_the_padded_vocab_is_known_so_the_padding_rows_are_kept(tmp_path):
    model = _hf_model("llama", vocab=500)  # padded to 512 as --make-vocab-size-divisible-by 128
    args = _megatron_args(model, padded_vocab_size=512, vocab_size=None)
    run = _megatron_run(tmp_path, model, args, rows=512)
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    assert code == 0, stdout + err
    assert "padded_vocab_size=512 but no vocab_size: all 512 rows are kept" in err, err
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 512
    ids, expected = _source_logits(model)
    torch.testing.assert_close(logits_of(out, ids)[..., :500], expected, rtol=0, atol=1e-5)


def test_a_known_vocab_size_drops_the_padding_rows(tmp_path):
    model = _hf_model("llama", vocab=500)
    run = _megatron_run(
        tmp_path, model, _megatron_args(model, padded_vocab_size=512, vocab_size=500), rows=512
    )
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    assert code == 0 and "dropped 12 rows of Megatron's vocabulary padding" in err, stdout + err
    ids, expected = _source_logits(model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)


def test_hf_config_wins_over_the_args_and_says_so(tmp_path):
    model = _hf_model("qwen2")
    run = _megatron_run(tmp_path, model, _megatron_args(model, normalization="LayerNorm"))
    model.config.save_pretrained(tmp_path / "assets")
    out = tmp_path / "hf"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--hf-config", tmp_path / "assets", "--out", out
    )
    assert code == 0 and f"config.json from --hf-config {tmp_path / 'assets'}" in err, stdout + err


def test_args_lacking_the_sizes_ask_for_hf_config_naming_them(tmp_path):
    model = _hf_model("llama")
    args = _megatron_args(model)
    del args.num_attention_heads, args.ffn_hidden_size
    run = _megatron_run(tmp_path, model, args)
    code, _out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 2 and "args lacks num_attention_heads, ffn_hidden_size" in line, err
    assert "pass --hf-config" in line


# --------------------------------------------------------------------------- Megatron-Bridge
def _tokenizer(target: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {f"w{i}": i for i in range(vocab - 1)} | {"<unk>": vocab - 1}
    backend = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>").save_pretrained(target)


def _bridge_model_section(model) -> dict:
    """What Megatron-Bridge's GPTModelProvider writes under `model:` in run_config.yaml."""
    config = model.config
    family = config.model_type
    return {
        "_target_": f"megatron.bridge.models.{family}.{family.capitalize()}ModelProvider",
        "num_layers": config.num_hidden_layers,
        "hidden_size": config.hidden_size,
        "ffn_hidden_size": config.intermediate_size,
        "num_attention_heads": config.num_attention_heads,
        "num_query_groups": config.num_key_value_heads,
        "kv_channels": getattr(config, "head_dim", None)
        or config.hidden_size // config.num_attention_heads,
        "seq_length": config.max_position_embeddings,
        "rotary_base": config.rope_parameters["rope_theta"],
        "layernorm_epsilon": config.rms_norm_eps,
        "normalization": "RMSNorm",
        "gated_linear_unit": True,
        "activation_func": {"_target_": "torch.nn.functional.silu", "_call_": False},
        "position_embedding_type": "rope",
        "rotary_percent": 1.0,
        "share_embeddings_and_output_weights": config.tie_word_embeddings,
        "add_qkv_bias": family == "qwen2",
        "add_bias_linear": False,
        "qk_layernorm": family == "qwen3",
        "num_moe_experts": None,
        "vocab_size": config.vocab_size,
        "should_pad_vocab": True,
        "make_vocab_size_divisible_by": 128,
        "params_dtype": {"_target_": "torch.float32", "_call_": False},
        "bf16": False,
    }


def _train_state(step: int) -> dict:
    return {
        "step": torch.tensor(step, dtype=torch.int64),
        "consumed_train_samples": torch.tensor(step * 8, dtype=torch.int64),
        "skipped_train_samples": torch.tensor(0, dtype=torch.int64),
        "consumed_valid_samples": torch.tensor(0, dtype=torch.int64),
        "floating_point_operations_so_far": torch.tensor(1e12, dtype=torch.float64),
        "do_train": torch.tensor(True),
        "do_valid": torch.tensor(False),
        "do_test": torch.tensor(False),
    }


def _bridge_run(root: Path, model, steps=(10, 20), rows: int | None = None) -> Path:
    """RUN/{latest_train_state.pt, latest_checkpointed_iteration.txt, iter_N/{DCP,
    train_state.pt, run_config.yaml, tokenizer/}} as Megatron-Bridge's save_checkpoint
    writes them with ckpt_format fsdp_dtensor (its tracker names the last step)."""
    run = root / "bridge"
    for step in steps:
        it = _save({"model": _mcore_weights(model, rows)}, run / f"iter_{step:07d}")
        torch.save(_train_state(step), it / "train_state.pt")
        section = {
            "model": _bridge_model_section(model),
            "tokenizer": {"tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": "/m/q"},
            "checkpoint": {"ckpt_format": "fsdp_dtensor", "save": str(run)},
        }
        (it / "run_config.yaml").write_text(yaml.safe_dump(section))
        _tokenizer(it / "tokenizer", model.config.vocab_size)
    torch.save(_train_state(steps[-1]), run / "latest_train_state.pt")
    (run / "latest_checkpointed_iteration.txt").write_text(str(steps[-1]))
    return run


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "llama"])
def test_a_bridge_run_dir_resolves_and_exports_with_its_tokenizer(family, tmp_path):
    from transformers import AutoTokenizer

    model = _hf_model(family, vocab=500)
    run = _bridge_run(tmp_path, model, rows=512)
    paths = layout.resolve_checkpoint(run)
    assert paths.kind == layout.MEGATRON_BRIDGE and paths.step == 20
    assert layout.resolve_checkpoint(run / "iter_0000010").kind == layout.MEGATRON_BRIDGE
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
    ids, expected = _source_logits(model)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)
    code, stdout, err = run_cli("ckpt", "validate", run, "--json")
    report = json.loads(stdout)
    assert code == 0 and report["layout"] == "megatron-bridge" and report["step"] == 20, stdout


def test_bridge_reads_latest_train_state_before_the_text_tracker(tmp_path):
    """Megatron-Bridge resumes from latest_train_state.pt and falls back to the .txt."""
    run = _bridge_run(tmp_path, _hf_model("llama"))
    (run / "latest_checkpointed_iteration.txt").write_text("10")
    assert layout.resolve_checkpoint(run).step == 20
    torch.save(_train_state(10), run / "latest_train_state.pt")
    assert layout.resolve_checkpoint(run).step == 10


def test_a_bridge_tracker_that_is_not_a_train_state_is_exit_1(tmp_path):
    run = _bridge_run(tmp_path, _hf_model("llama"), steps=(10,))
    (run / "latest_train_state.pt").write_bytes(b"not a zip")
    code, stdout, err = run_cli("ckpt", "validate", run)
    line = one_error_line(err)
    assert code == 1 and "latest_train_state.pt" in line and "iter_0000010" in line, stdout + err


def test_bridge_torch_dist_dirs_are_still_named_as_what_reads_them(tmp_path):
    run = tmp_path / "bridge"
    it = run / "iter_0000020"
    it.mkdir(parents=True)
    (it / "metadata.json").write_text('{"sharded_backend": "torch_dist"}')
    (it / "common.pt").write_bytes(b"")
    torch.save(_train_state(20), it / "train_state.pt")
    torch.save(_train_state(20), run / "latest_train_state.pt")
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
    model = _hf_model("qwen2")
    good = _megatron_run(tmp_path / "good", model, _megatron_args(model))
    code, stdout, err = run_cli("ckpt", "validate", good, "--json")
    assert code == 0 and json.loads(stdout)["findings"] == [], stdout + err
    wrong = _megatron_run(tmp_path / "wrong", model, _megatron_args(model, ffn_hidden_size=64))
    code, stdout, err = run_cli("ckpt", "validate", wrong)
    assert code == 1 and "[args]" in stdout and "do not fit" in stdout, stdout + err


def test_validate_refuses_args_whose_pickle_calls_os_system(tmp_path):
    marker = tmp_path / "ran"
    model = _hf_model("llama")
    run = _megatron_run(tmp_path, model, _megatron_args(model, hook=_RunsACommand(marker)))
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 1 and "system" in stdout and "[args]" in stdout, stdout + err
    assert not marker.exists()


def test_inspect_shows_the_model_the_args_record(tmp_path):
    model = _hf_model("qwen3")
    run = _megatron_run(tmp_path, model, _megatron_args(model))
    code, stdout, err = run_cli("ckpt", "inspect", run)
    assert code == 0 and "model       Qwen3ForCausalLM, 2 layers, hidden 128" in stdout, stdout
    code, stdout, err = run_cli("ckpt", "inspect", run, "--json")
    recorded = json.loads(stdout)["recorded_model"]
    assert recorded["config"]["head_dim"] == 48 and recorded["source"].endswith("[args]")
    hostile = _megatron_run(
        tmp_path / "hostile", model, _megatron_args(model, hook=_RunsACommand(tmp_path / "ran"))
    )
    code, stdout, err = run_cli("ckpt", "inspect", hostile, "--json")
    problem = json.loads(stdout)["recorded_model"]["problem"]
    assert code == 0 and "system" in problem and not (tmp_path / "ran").exists(), stdout + err
