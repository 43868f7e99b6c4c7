"""LoRA SFT on FSDP2 (2 gloo ranks, CPU): it learns, resumes exactly, checkpoints the adapter
only, validate checks the base it names, and both exports (merged, PEFT adapter) give the
logits PEFT itself computes."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
import xxhash
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.check.validate import validate_checkpoint
from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.format.checkpoint_resolution import resolve_checkpoint
from mfsdp_ckpt.format.manifest import read_manifest
from mfsdp_ckpt.format.run_steps import list_complete_steps
from mfsdp_ckpt.lora import parse_adapter_key, peft_name
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.ckpt_edits import resealed
from tests.support.distributed import run_distributed
from tests.support.export import fixed_inputs, load_report, logits_of
from tests.support.metrics import read_metrics
from tests.support.override_lists import replaced
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.config import ConfigError, ModelConfig
from trainer.resume import ResumeMismatchError
from trainer.sft import run_sft

RANK, ALPHA = 8, 16
LINEAR = ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]
SETTINGS = (
    "trainer.total_steps=4",
    "data.global_batch_size=8",
    "data.max_tokens_per_micro_batch=256",
    "optim.warmup_steps=0",
    "optim.lr=1e-2",
    f"model.lora_rank={RANK}",
    f"model.lora_alpha={ALPHA}",
)


def _losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["train/loss"] for r in read_metrics(run_dir) if "train/loss" in r}


def _two_rank_runs(rank: int, world_size: int, root: str) -> None:
    root = Path(root)
    data, base = root / "train.jsonl", f"model.path={root / 'base'}"
    run_sft(tiny_config(data, root / "straight", base, *SETTINGS))
    first = run_sft(tiny_config(data, root / "split", base, *SETTINGS, "trainer.stop_at_step=2"))
    assert first.final_step == 2 and first.resumed_from is None
    second = run_sft(tiny_config(data, root / "split", base, *SETTINGS))
    assert second.resumed_from == 2 and second.final_step == 4
    # bf16 compute: frozen base held in bf16 next to fp32 adapters inside each FSDP2 unit
    run_sft(
        tiny_config(
            data,
            root / "bf16",
            base,
            *replaced(SETTINGS, "trainer.total_steps=2"),
            "strategy.mixed_precision=bf16",
        )
    )
    # the adapter must not continue on other weights of the same shapes: every rank refuses
    other = f"model.path={root / 'other_base'}"
    with pytest.raises(
        ResumeMismatchError, match=r"in this run's base \S+, model\.safetensors has "
    ):
        resume = f"checkpoint.resume={root / 'split'}"
        run_sft(tiny_config(data, root / "wrong_base", other, *SETTINGS, resume))
    # nor at another scale: alpha / r applied to the trained A and B (was accepted)
    with pytest.raises(ResumeMismatchError, match=rf"lora_alpha {ALPHA}, this run has 64"):
        resume = f"checkpoint.resume={root / 'split'}"
        alpha = replaced(SETTINGS, "model.lora_alpha=64")
        run_sft(tiny_config(data, root / "alpha", base, *alpha, resume))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("lora")
    build_tiny_model_dir(root / "base", seed=0, with_weights=True)
    build_tiny_model_dir(root / "other_base", seed=1, with_weights=True)  # same shapes and sizes
    write_chat_jsonl(root / "train.jsonl", rows=40)
    run_distributed(_two_rank_runs, 2, str(root))
    return root


@pytest.fixture(scope="module")
def exports(runs) -> Path:
    export_hf(runs / "split", runs / "merged", verify=True)
    export_hf(runs / "split", runs / "adapter", adapter_only=True, verify=True)
    return runs


def _adapter_bytes(config: dict) -> int:
    """fp32 bytes of rank-RANK adapters on every linear layer of the decoder, from the config."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    kv = config["num_key_value_heads"] * hidden // config["num_attention_heads"]
    shapes = [
        (hidden, hidden),
        (hidden, kv),
        (hidden, kv),
        (hidden, hidden),
        (hidden, inter),
        (hidden, inter),
        (inter, hidden),
    ]  # (in, out): q k v o gate up down
    per_layer = sum(RANK * (fan_in + fan_out) for fan_in, fan_out in shapes)
    return 4 * config["num_hidden_layers"] * per_layer


def test_lora_learns_and_resumes_exactly(runs):
    straight, split = _losses(runs / "straight"), _losses(runs / "split")
    assert sorted(straight) == sorted(split) == [1, 2, 3, 4]
    assert straight == split  # bitwise: same floats, not just close
    assert straight[4] < straight[1] - 0.3
    assert list_complete_steps(runs / "split") == [2, 4]
    bf16 = _losses(runs / "bf16")
    assert bf16[2] < bf16[1]


def test_checkpoint_holds_the_adapter_only(runs):
    paths = resolve_checkpoint(runs / "split")
    reader = CheckpointReader(paths.dist_ckpt)
    model_keys = [k for k in reader.tensors if k.startswith("model.")]
    parsed = [parse_adapter_key(k[len("model.") :]) for k in model_keys]
    assert all(parsed) and len(parsed) == 2 * 2 * len(LINEAR)  # A and B, 2 layers
    assert sorted({p.module.rsplit(".", 1)[-1] for p in parsed}) == LINEAR
    config = json.loads((runs / "base" / "config.json").read_text())
    adapter = _adapter_bytes(config)
    assert sum(reader.tensors[k].nbytes for k in model_keys) == adapter
    state = [k for k in reader.tensors if k.startswith("optimizer.state.")]
    assert len([k for k in state if k.endswith(("exp_avg", "exp_avg_sq"))]) == 2 * len(model_keys)
    steps = sum(reader.tensors[k].nbytes for k in state if k.endswith(".step"))
    assert sum(e.nbytes for e in reader.tensors.values()) == 3 * adapter + steps
    on_disk = sum(f.stat().st_size for f in paths.dist_ckpt.iterdir())  # + DCP's per-blob framing
    assert on_disk < (runs / "base" / "model.safetensors").stat().st_size
    bf16 = CheckpointReader(resolve_checkpoint(runs / "bf16").dist_ckpt)
    adapters = [entry for key, entry in bf16.tensors.items() if key.startswith("model.")]
    assert {entry.dtype.name for entry in adapters} == {"float32"}  # trainable: fp32 main weights


def test_manifest_records_base_model_and_lora_config(runs):
    manifest = read_manifest(resolve_checkpoint(runs / "split").manifest)
    base = runs / "base"
    assert manifest.base_model["path"] == str(base.resolve())
    assert manifest.base_model["files"] == {
        "model.safetensors": {
            "size": (base / "model.safetensors").stat().st_size,
            "xxh3_128": xxhash.xxh3_128((base / "model.safetensors").read_bytes()).hexdigest(),
        }
    }
    assert manifest.lora["r"] == RANK and manifest.lora["lora_alpha"] == ALPHA
    assert manifest.lora["target_modules"] == LINEAR and manifest.lora["peft_type"] == "LORA"


def _with_base(runs: Path, tmp_path: Path, base: Path) -> Path:
    """A copy of the run's newest step whose manifest names `base` as its base model."""
    step = tmp_path / "global_step_4"
    shutil.copytree(runs / "split" / "global_step_4", step)
    data = json.loads((step / "manifest.json").read_text())
    data["base_model"]["path"] = str(base)
    (step / "manifest.json").write_text(json.dumps(resealed(data)))
    return step


def test_validate_checks_the_base_named_in_the_manifest(runs, tmp_path):
    report = validate_checkpoint(runs / "split", deep=True)
    assert report.ok(strict=True), report.findings

    absent = _with_base(runs, tmp_path / "absent", tmp_path / "nowhere")
    report = validate_checkpoint(absent)
    assert report.ok() and not report.ok(strict=True)
    assert any("not present here; cannot check" in f.message for f in report.findings)

    other = shutil.copytree(runs / "other_base", tmp_path / "other_base")  # same sizes, other bytes
    swapped = _with_base(runs, tmp_path / "swapped", other)
    assert validate_checkpoint(swapped).ok(strict=True)  # cheap checks compare sizes only
    deep = validate_checkpoint(swapped, deep=True)
    errors = [f.where for f in deep.findings if f.severity == "error"]
    assert errors == [str(other / "model.safetensors")]

    (other / "model.safetensors").unlink()
    missing = validate_checkpoint(swapped)
    errors = [f.message for f in missing.findings if f.severity == "error"]
    assert any("weight file is missing" in message for message in errors)


def test_validate_reads_only_regular_files_directly_in_the_base_dir(runs, tmp_path):
    escape = _with_base(runs, tmp_path / "escape", runs / "base")
    data = json.loads((escape / "manifest.json").read_text())
    record = data["base_model"]["files"]["model.safetensors"]
    data["base_model"]["files"] = {"../train.jsonl": record}  # outside the base dir
    (escape / "manifest.json").write_text(json.dumps(resealed(data)))
    errors = [f.message for f in validate_checkpoint(escape).findings if f.severity == "error"]
    assert any("is not a plain file name" in message for message in errors), errors

    fifo_base = tmp_path / "fifo_base"
    fifo_base.mkdir()
    os.mkfifo(fifo_base / "model.safetensors")  # opening it to hash would block forever
    fifo = _with_base(runs, tmp_path / "fifo", fifo_base)
    report = validate_checkpoint(fifo, deep=True)
    errors = [f.message for f in report.findings if f.severity == "error"]
    assert errors == ["not a regular file"]


def test_merged_export_equals_peft_on_its_base(exports):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    assert load_report(exports / "merged") == {}
    config = json.loads((exports / "base" / "config.json").read_text())
    inputs = fixed_inputs(config["vocab_size"])
    merged = logits_of(exports / "merged", inputs, torch.float32)
    base_logits = logits_of(exports / "base", inputs, torch.float32)
    base = AutoModelForCausalLM.from_pretrained(str(exports / "base"), dtype=torch.float32).eval()
    peft_model = PeftModel.from_pretrained(base, str(exports / "adapter")).eval()
    with torch.no_grad():
        peft_logits = peft_model(input_ids=inputs).logits
    assert torch.allclose(merged, peft_logits, atol=1e-5, rtol=0)
    assert (merged - base_logits).abs().max() > 1e-2  # the adapter trained: it changes the model


def test_adapter_export_holds_the_trained_adapter(exports):
    from safetensors.torch import load_file

    reader = CheckpointReader(resolve_checkpoint(exports / "split").dist_ckpt)
    written = load_file(str(exports / "adapter" / "adapter_model.safetensors"))
    stored = {
        peft_name(parse_adapter_key(key[len("model.") :])): key
        for key in reader.tensors
        if key.startswith("model.")
    }
    assert sorted(written) == sorted(stored)
    for name, key in stored.items():
        assert torch.equal(written[name], reader.read_tensor(key)), name
    config = json.loads((exports / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str((exports / "base").resolve())
    assert config["r"] == RANK and config["target_modules"] == LINEAR


def _load_in_vllm(_rank: int, _world: int, adapter_dir: str, results: dict) -> None:
    """vLLM's own LoRA loading path (config checks, then tensors), in a child process: vLLM
    changes process-wide torch settings when imported."""
    from vllm.config.lora import LoRAConfig
    from vllm.lora.lora_model import LoRAModel
    from vllm.lora.peft_helper import PEFTHelper

    helper = PEFTHelper.from_local_dir(adapter_dir, max_position_embeddings=512)
    helper.validate_legal(LoRAConfig(max_lora_rank=RANK))
    model = LoRAModel.from_local_checkpoint(
        adapter_dir, set(LINEAR), helper, lora_model_id=1, device="cpu", dtype=torch.float32
    )
    for name, weights in model.loras.items():
        results[name] = (weights.lora_a.clone(), weights.lora_b.clone(), weights.scaling)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_vllm_lora_loader_accepts_the_adapter_export(exports):
    from safetensors.torch import load_file

    results = mp.Manager().dict()
    run_distributed(_load_in_vllm, 1, str(exports / "adapter"), results)
    written = load_file(str(exports / "adapter" / "adapter_model.safetensors"))
    assert len(results) == 2 * len(LINEAR)  # every linear layer of both decoder layers
    for module, (lora_a, lora_b, scaling) in results.items():
        assert torch.equal(lora_a, written[f"base_model.model.{module}.lora_A.weight"]), module
        assert torch.equal(lora_b, written[f"base_model.model.{module}.lora_B.weight"]), module
        assert scaling == ALPHA / RANK


def test_cli_exports_and_refusals(exports, tmp_path):
    runner = CliRunner()

    def export(ckpt: Path, out: str, *flags: str):
        args = ["ckpt", "export-hf", str(ckpt), "--out", str(tmp_path / out), *flags]
        return runner.invoke(app, args)

    result = export(exports / "split", "a", "--adapter-only", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["layout"] == "peft adapter"
    dist_ckpt = resolve_checkpoint(exports / "split").dist_ckpt
    bare = shutil.copytree(dist_ckpt, tmp_path / "bare")  # no manifest around it
    result = export(bare, "b", "--adapter-only")
    assert result.exit_code == 2 and "not a local LoRA checkpoint" in result.output
    moved = _with_base(exports, tmp_path / "moved", tmp_path / "nowhere")
    result = export(moved, "c")
    assert result.exit_code == 1 and "nowhere" in result.output and not (tmp_path / "c").exists()
    result = export(moved, "d", "--adapter-only")
    assert result.exit_code == 0, result.output  # the adapter alone does not need the base
    base = exports / "base"  # a model dir, so it looks like an earlier export: never replaced
    before = sorted((p.name, p.stat().st_size) for p in base.iterdir())
    args = ["ckpt", "export-hf", str(exports / "split"), "--out", str(base), "--overwrite"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "holds the model dir" in result.output, result.output
    assert sorted((p.name, p.stat().st_size) for p in base.iterdir()) == before


def test_lora_adapter_path_starts_from_that_adapter(exports):
    from safetensors.torch import load_file

    from trainer.model import build_hf_config, build_model, load_tokenizer

    cfg = ModelConfig(path=str(exports / "base"), lora_adapter_path=str(exports / "adapter"))
    model = build_model(cfg, build_hf_config(cfg, load_tokenizer(cfg)), torch.device("cpu"), seed=0)
    trained = load_file(str(exports / "adapter" / "adapter_model.safetensors"))
    params = dict(model.named_parameters())
    ours = {
        name: name.removeprefix("base_model.model.").replace(".weight", ".default.weight")
        for name in trained
    }
    for name, tensor in trained.items():
        assert torch.equal(params[ours[name]], tensor), name
    assert {name for name, p in params.items() if p.requires_grad} == set(ours.values())


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(lora_rank=-1), "model.lora_rank must be >= 0"),
        (dict(lora_rank=4, lora_alpha=0), "model.lora_alpha must be > 0"),
        (
            dict(lora_rank=4, lora_alpha=1e300),
            r"^model\.lora_alpha: 1e\+300 over the rank 4 scales the adapter by 2\.5e\+299, past",
        ),
        (dict(lora_rank=2, lora_alpha=20000.5), "scales the adapter by 10000.2, past the 10000"),
        (dict(lora_rank=4, target_modules=["lm_head"]), "lm_head cannot take a LoRA adapter"),
        (dict(lora_rank=4, target_modules=["no_such_proj"]), "model.target_modules"),
        (dict(lora_adapter_path="/nonexistent/adapter"), "adapter_config.json is missing"),
    ],
)
def test_bad_lora_settings_are_refused_with_the_key(fields, message):
    from trainer.model import build_hf_config, build_model, load_tokenizer

    cfg = ModelConfig(**fields)
    with pytest.raises(ConfigError, match=message):
        build_model(cfg, build_hf_config(cfg, load_tokenizer(cfg)), torch.device("cpu"), seed=0)


def test_the_largest_scale_a_lora_run_takes_builds():
    from trainer.lora import lora_scales
    from trainer.lora_scale import MAX_LORA_SCALE
    from trainer.model import build_hf_config, build_model, load_tokenizer

    cfg = ModelConfig(lora_rank=2, lora_alpha=2 * MAX_LORA_SCALE)
    model = build_model(cfg, build_hf_config(cfg, load_tokenizer(cfg)), torch.device("cpu"), 0)
    assert {scale for _adapter, scale in lora_scales(model).values()} == {MAX_LORA_SCALE}


@pytest.mark.parametrize(
    ("plant", "says"),
    [
        # RecursionError, no ValueError: was a traceback
        (
            lambda f: f.write_text('{"a":' * 5000 + "1" + "}" * 5000),
            "not valid JSON (nested too deeply)",
        ),
        # sparse, read whole before (1 GiB took 2.5 GB of memory): refused by its size
        (
            lambda f: f.touch() or os.truncate(f, 2 << 20),
            f"{2 << 20} bytes, more than the {1 << 20} this file may have",
        ),
        (
            lambda f: f.write_text('{"peft_type": "LORA", "r": NaN}'),
            "r is nan, not a finite number (NaN and Infinity are not JSON)",
        ),
    ],
    ids=["nested-5000-deep", "2-MiB", "NaN"],
)
def test_a_hostile_adapter_config_is_one_line_naming_it(tmp_path, plant, says):
    from trainer.model import build_hf_config, build_model, load_tokenizer

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    plant(adapter / "adapter_config.json")
    cfg = ModelConfig(lora_adapter_path=str(adapter))
    with pytest.raises(ConfigError) as caught:
        build_model(cfg, build_hf_config(cfg, load_tokenizer(cfg)), torch.device("cpu"), seed=0)
    assert (
        str(caught.value) == f"model.lora_adapter_path: {adapter / 'adapter_config.json'}: {says}"
    )
