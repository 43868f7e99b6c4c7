"""Megatron PEFT (LoRA) checkpoints exported merged or as a Hugging Face PEFT adapter.

Megatron-Bridge's LoRA adds `<module>.adapter.linear_in.weight` (A: dim x in) and
`.adapter.linear_out.weight` (B: out x dim) to linear_qkv, linear_proj, linear_fc1 and
linear_fc2 and scales B @ A by alpha / dim. verl's Megatron-FSDP save keeps the adapter
beside the unmerged base weights; Megatron-Bridge's save_checkpoint keeps the adapter's
tensors only (apply_peft_adapter_filter_to_state_dict), with its PEFT config in
run_config.yaml. The adapter here is drawn per Hugging Face module (q_proj, k_proj, ... with
one A per fused Megatron module) and fused into Megatron's layout by the tests' own
interleave (`hf_to_mcore`), so the reference, the HF model with `W + scale * B @ A` added in
plain torch, is computed without the code under test. A run with multi-token prediction
layers may hold adapters on them too (target_modules match the MTP layer's linear_qkv ...):
`--drop-mtp` leaves them out with the MTP layers.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
import yaml

from tests.support.export import fixed_inputs, load_report, logits_of
from tests.support.hf_to_mcore import _interleave_per_group, tiny_causal_lm, to_mcore
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import bridge_run, mcore_weights, mtp_weights, save_dcp

RANK, ALPHA = 4, 8.0
# Megatron module -> the HF modules it stands for
_FUSED = {
    "self_attention.linear_qkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "self_attention.linear_proj": ("self_attn.o_proj",),
    "mlp.linear_fc1": ("mlp.gate_proj", "mlp.up_proj"),
    "mlp.linear_fc2": ("mlp.down_proj",),
}


def _hf_lora(model, parts=tuple(_FUSED)) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{HF module: (A, B)}, one A shared by the HF modules of one fused Megatron module."""
    generator = torch.Generator().manual_seed(11)
    weights, found = model.state_dict(), {}
    for layer in range(model.config.num_hidden_layers):
        for part in parts:
            modules = [f"model.layers.{layer}.{m}" for m in _FUSED[part]]
            cols = weights[f"{modules[0]}.weight"].shape[1]
            a = torch.randn(RANK, cols, generator=generator) * 0.1
            for module in modules:
                rows = weights[f"{module}.weight"].shape[0]
                found[module] = (a, torch.randn(rows, RANK, generator=generator) * 0.1)
    return found


def _megatron_adapters(model, lora) -> dict[str, torch.Tensor]:
    """The same adapter under Megatron's names, its B fused as the base weights are."""
    groups, found = model.config.num_key_value_heads, {}
    for layer in range(model.config.num_hidden_layers):
        for part, hf_modules in _FUSED.items():
            pairs = [lora.get(f"model.layers.{layer}.{m}") for m in hf_modules]
            if pairs[0] is None:
                continue
            bs = [b for _, b in pairs]
            fused = _interleave_per_group(*bs, groups) if len(bs) == 3 else torch.cat(bs)
            stem = f"module.decoder.layers.{layer}.{part}.adapter."
            found[stem + "linear_in.weight"] = pairs[0][0].clone()
            found[stem + "linear_out.weight"] = fused
    return found


def _merged(model, lora, scale: float = ALPHA / RANK):
    """The reference: `model` with scale * B @ A added to every adapted weight."""
    merged = copy.deepcopy(model)
    params = dict(merged.named_parameters())
    with torch.no_grad():
        for module, (a, b) in lora.items():
            params[f"{module}.weight"].add_(scale * (b @ a))
    return merged


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=fixed_inputs(model.config.vocab_size)).logits


def _verl_lora_run(tmp_path, model, lora, saved_alpha: float | None = ALPHA, base=None):
    """verl's v2 layout of a Megatron-FSDP LoRA run: one DCP with base (`base`, else
    `mcore_weights`) and adapter; the PEFT adapter mbridge saves into
    model/huggingface/adapter/ when `saved_alpha` is given."""
    run = tmp_path / "verl"
    actor = run / "global_step_5" / "actor"
    weights = {**(base or mcore_weights(model)), **_megatron_adapters(model, lora)}
    save_dcp({"model": weights}, actor / "model" / "dist_ckpt")
    hf = actor / "model" / "huggingface"
    model.config.save_pretrained(hf)
    if saved_alpha is not None:
        (hf / "adapter").mkdir()
        saved = {"peft_type": "LORA", "r": RANK, "lora_alpha": saved_alpha}
        (hf / "adapter" / "adapter_config.json").write_text(json.dumps(saved))
    (actor / "ckpt_contents.json").write_text(json.dumps({"schema_version": 2}))
    (run / "latest_checkpointed_iteration.txt").write_text("5")
    return run


def _bridge_lora_run(tmp_path, model, lora, peft: dict | None):
    """Megatron-Bridge's PEFT save: the adapter's tensors only, `peft` in run_config.yaml."""
    run = bridge_run(tmp_path, model, steps=(10,), rows=512)
    step = run / "iter_0000010"
    for file in [*step.glob("*.distcp"), step / ".metadata"]:
        file.unlink()
    adapters = _megatron_adapters(model, lora)
    save_dcp({"model": adapters, "checkpoint_version": 3.0, "iteration": 10}, step)
    if peft is not None:
        config = yaml.safe_load((step / "run_config.yaml").read_text())
        (step / "run_config.yaml").write_text(yaml.safe_dump({**config, "peft": peft}))
    return run, step


BRIDGE_PEFT = {
    "_target_": "megatron.bridge.peft.lora.LoRA",
    "target_modules": ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"],
    "dim": RANK,
    "alpha": int(ALPHA),
    "dropout": 0.1,
}


@pytest.mark.parametrize(
    ("text", "says"),
    [("[" * 100_000, "not valid JSON"), ("[8]", "expected a JSON object, found list")],
    ids=["deep", "list"],
)
def test_a_malformed_saved_adapter_config_is_one_line(tmp_path, text, says):
    """Deep nesting raised RecursionError (no ValueError): a traceback, not one line."""
    model = tiny_causal_lm("qwen2", vocab=500)
    run = _verl_lora_run(tmp_path, model, _hf_lora(model))
    config = next(run.rglob("adapter_config.json"))
    config.write_text(text)
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    line = one_error_line(err)
    assert code == 1 and "adapter_config.json" in line and says in line, stdout + err


def test_verl_lora_beside_its_base_exports_merged(tmp_path):
    """Was: exit 2 "export-hf does not merge Megatron adapters". Alpha from the PEFT adapter
    verl saved beside it; the export gives the logits of W + alpha / dim * B @ A."""
    model = tiny_causal_lm("qwen2", vocab=500)
    lora = _hf_lora(model)
    run = _verl_lora_run(tmp_path, model, lora)
    out = tmp_path / "out"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out, "--verify")
    assert code == 0, stdout + err
    assert "LoRA alpha 8 from" in err and "adapter_config.json" in err, err
    assert load_report(out) == {}
    ids = fixed_inputs(model.config.vocab_size)
    expected = _logits(_merged(model, lora))
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-4)
    assert (expected - _logits(model)).abs().max() > 1e-2  # the adapter changes the model
    described = f"Megatron LoRA rank {RANK} on 8 modules"
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 0 and f"{described} (linear_fc1, linear_fc2, linear_proj, linear_qkv)" in stdout
    assert "beside the base weights" in stdout and "warning" not in stdout, stdout + err
    code, stdout, _ = run_cli("ckpt", "inspect", run)
    assert code == 0 and f"lora        {described}" in stdout, stdout


def test_alpha_recorded_nowhere_is_asked_for_then_taken_from_lora_alpha(tmp_path):
    model = tiny_causal_lm("llama", vocab=500)
    lora = _hf_lora(model, parts=("self_attention.linear_qkv", "mlp.linear_fc1"))
    run = _verl_lora_run(tmp_path, model, lora, saved_alpha=None)
    out = tmp_path / "out"
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", out)
    line = one_error_line(err)
    assert code == 2 and f"rank {RANK}" in line and "--lora-alpha A" in line, err
    assert not out.exists()
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--out", out, "--lora-alpha", "2", "--dtype", "fp32"
    )
    assert code == 0 and "from --lora-alpha" in err, stdout + err
    expected = _logits(_merged(model, lora, scale=2 / RANK))
    torch.testing.assert_close(logits_of(out, fixed_inputs(500)), expected, rtol=0, atol=1e-4)
    dense = tmp_path / "dense"
    save_dcp({"model": mcore_weights(model)}, dense / "dist_ckpt")
    model.config.save_pretrained(dense / "huggingface")
    code, _, err = run_cli("ckpt", "export-hf", dense, "--out", tmp_path / "o", "--lora-alpha", "2")
    line = one_error_line(err)
    assert code == 2 and "holds no LoRA adapter to merge" in line, err


def test_a_saved_adapter_config_of_another_rank_or_not_json_is_refused(tmp_path):
    model = tiny_causal_lm("qwen2", vocab=500)
    run = _verl_lora_run(tmp_path, model, _hf_lora(model))
    saved = next(run.rglob("adapter_config.json"))
    saved.write_text(json.dumps({"peft_type": "LORA", "r": 16, "lora_alpha": 32}))
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    line = one_error_line(err)
    assert code == 2 and str(saved) in line and "r 16" in line and f"rank {RANK}" in line, err
    saved.write_text('{"r": 4, "r": 4')
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    line = one_error_line(err)
    assert code == 1 and str(saved) in line and "not valid JSON" in line, err
    assert not (tmp_path / "out").exists()


def test_adapter_only_writes_a_peft_adapter_equal_to_the_merged_model(tmp_path):
    """Bridge's adapter-only save, alpha from run_config.yaml's peft section: the PEFT
    adapter loaded onto the base by peft gives the reference's logits."""
    from peft import PeftModel

    model = tiny_causal_lm("qwen2", vocab=500)
    lora = _hf_lora(model)
    run, _ = _bridge_lora_run(tmp_path, model, lora, BRIDGE_PEFT)
    out = tmp_path / "adapter"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--out", out, "--adapter-only", "--verify", "--json"
    )
    assert code == 0, stdout + err
    result = json.loads(stdout)
    assert result["layout"] == "peft adapter" and result["tensors"] == 2 * len(lora), result
    config = json.loads((out / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"]) == (RANK, ALPHA), config
    assert sorted(config["target_modules"]) == sorted(
        {m.rsplit(".", 1)[-1] for hf in _FUSED.values() for m in hf}
    )
    assert sorted(p.name for p in out.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    adapted = PeftModel.from_pretrained(tiny_causal_lm("qwen2", vocab=500), str(out)).eval()
    expected = _logits(_merged(model, lora))
    torch.testing.assert_close(_logits(adapted), expected, rtol=0, atol=1e-4)


def test_adapter_only_on_some_layers_names_the_modules(tmp_path):
    """Bridge's target_modules may pick layers: the adapter names full modules, so PEFT adds
    no adapter where the checkpoint has none."""
    from peft import PeftModel

    model = tiny_causal_lm("llama", vocab=500)
    lora = {m: ab for m, ab in _hf_lora(model).items() if m.startswith("model.layers.1.")}
    run = _verl_lora_run(tmp_path, model, lora)
    out = tmp_path / "adapter"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out, "--adapter-only")
    assert code == 0, stdout + err
    config = json.loads((out / "adapter_config.json").read_text())
    assert sorted(config["target_modules"]) == sorted(lora), config
    adapted = PeftModel.from_pretrained(tiny_causal_lm("llama", vocab=500), str(out)).eval()
    torch.testing.assert_close(_logits(adapted), _logits(_merged(model, lora)), rtol=0, atol=1e-4)


def test_a_bridge_adapter_without_its_base_says_what_supplies_it(tmp_path):
    """validate checks the adapter against the config its run_config.yaml gives (and finds
    one that does not fit); export names the two options that do something with it."""
    model = tiny_causal_lm("qwen2", vocab=500)
    run, _ = _bridge_lora_run(tmp_path, model, _hf_lora(model), BRIDGE_PEFT)
    out = tmp_path / "out"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    line = one_error_line(err)
    assert code == 2 and "Megatron PEFT adapter tensor(s) and no base weights" in line, err
    assert "--adapter-only" in line and "--hf-config BASE_DIR" in line and not out.exists()
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 0 and "warning:" not in stdout and "error:" not in stdout, stdout + err
    assert f"Megatron LoRA rank {RANK} on 8 modules" in stdout and "adapter only" in stdout
    other = tmp_path / "other"
    tiny_causal_lm("qwen2", vocab=500, intermediate_size=256).save_pretrained(other)
    code, stdout, err = run_cli("ckpt", "validate", run, "--hf-config", other, "--json")
    findings = json.loads(stdout)["findings"]
    assert code == 1 and [f["severity"] for f in findings] == ["error", "error"], stdout
    assert findings[0]["message"].startswith("intermediate_size=256 (record: 192): not the model")
    assert "the adapter does not fit this config" in findings[1]["message"]
    assert (
        "linear_fc1.adapter.linear_out.weight]: adapter 384 x 128 does not fit the 512 x 128"
        in (findings[1]["message"])
    )


@pytest.mark.parametrize(
    ("extra", "variant"),
    [
        ("adapter.weight_magnitude", "DoRA"),
        ("adapters.second.linear_in.weight", "several adapters on one module"),
        ("adapter.adapter_gate.linear_in.weight", "no such part"),
    ],
)
def test_variants_that_are_not_plain_lora_are_refused_by_name(tmp_path, extra, variant):
    model = tiny_causal_lm("qwen2", vocab=500)
    run = _verl_lora_run(tmp_path, model, _hf_lora(model))
    weights = {**mcore_weights(model), **_megatron_adapters(model, _hf_lora(model))}
    weights[f"module.decoder.layers.0.self_attention.linear_qkv.{extra}"] = torch.ones(4, 4)
    dcp = run / "global_step_5" / "actor" / "model" / "dist_ckpt"
    for file in dcp.iterdir():
        file.unlink()
    save_dcp({"model": weights}, dcp)
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    line = one_error_line(err)
    assert code == 2 and variant in line and extra in line, err


def test_a_bridge_peft_config_of_another_kind_is_refused(tmp_path):
    model = tiny_causal_lm("qwen2", vocab=500)
    dora = {**BRIDGE_PEFT, "_target_": "megatron.bridge.peft.dora.DoRA"}
    run, _ = _bridge_lora_run(tmp_path, model, _hf_lora(model), dora)
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "o", "--adapter-only")
    line = one_error_line(err)
    assert code == 2 and "DoRA" in line and "run_config.yaml peft" in line, err


def test_the_peft_adapter_bridge_saved_beside_it_is_named(tmp_path):
    model = tiny_causal_lm("qwen2", vocab=500)
    run, step = _bridge_lora_run(tmp_path, model, _hf_lora(model), None)
    (step / "hf").mkdir()
    (step / "hf" / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out", "--json")
    failure = json.loads(stdout)
    assert code == 2 and failure["exit_code"] == 2, stdout + err
    assert failure["error"].endswith(f"a Hugging Face PEFT adapter saved with it: {step / 'hf'}")


def test_an_adapter_config_linked_from_elsewhere_is_not_named(tmp_path):
    """Only a regular file inside the step counts as the saved adapter: a link there is
    not followed (the line names no directory it would lead a user to)."""
    model = tiny_causal_lm("qwen2", vocab=500)
    run, step = _bridge_lora_run(tmp_path, model, _hf_lora(model), None)
    outside = tmp_path / "elsewhere.json"
    outside.write_text("{}")
    (step / "hf").mkdir()
    (step / "hf" / "adapter_config.json").symlink_to(outside)
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    line = one_error_line(err)
    assert code == 2 and "Megatron PEFT" in line and "saved with it" not in line, err


def test_a_bridge_adapter_merges_onto_the_base_named_by_hf_config(tmp_path):
    model = tiny_causal_lm("llama", vocab=500)
    lora = _hf_lora(model)
    run, _ = _bridge_lora_run(tmp_path, model, lora, BRIDGE_PEFT)
    base = tmp_path / "base"
    model.save_pretrained(base)
    out = tmp_path / "out"
    args = ("ckpt", "export-hf", run, "--out", out, "--hf-config", base, "--verify")
    code, stdout, err = run_cli(*args, "--max-shard-size", "200KB")
    assert code == 0 and "run_config.yaml peft" in err, stdout + err
    assert load_report(out) == {} and (out / "model.safetensors.index.json").is_file()
    expected = _logits(_merged(model, lora))
    torch.testing.assert_close(logits_of(out, fixed_inputs(500)), expected, rtol=0, atol=1e-4)


def test_a_base_of_other_shapes_or_without_weights_is_named(tmp_path):
    model = tiny_causal_lm("llama", vocab=500)
    run, _ = _bridge_lora_run(tmp_path, model, _hf_lora(model), BRIDGE_PEFT)
    config_only = tmp_path / "config_only"
    model.config.save_pretrained(config_only)
    code, _, err = run_cli(
        "ckpt", "export-hf", run, "--out", tmp_path / "a", "--hf-config", config_only
    )
    line = one_error_line(err)
    assert code == 2 and "no *.safetensors base weights" in line and "--adapter-only" in line
    other = copy.deepcopy(model.config)
    other.intermediate_size = 96
    from transformers import AutoModelForCausalLM

    wrong = tmp_path / "wrong"
    AutoModelForCausalLM.from_config(other).save_pretrained(wrong)
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "b", "--hf-config", wrong)
    line = one_error_line(err)
    # the record (run_config.yaml) says which base fits before any adapter is compared
    assert code == 2 and "intermediate_size=96 (record: 192): not the model" in line, err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_linear_fc1_adapter_saved_with_tensor_parallelism_is_refused(tmp_path):
    """Its B rows are [gate; up] per tensor-parallel rank, interleaved: read as [gate; up]
    it would merge wrong rows, and verl's record names no format that proves their order
    (tests/ckpt/test_interop_megatron_peft_tensor_parallel.py: one that does). Only
    linear_fc1 is affected (qkv keeps whole query groups per rank), so an adapter without
    it still exports."""
    model = tiny_causal_lm("qwen2", vocab=500)
    lora = _hf_lora(model)
    run = _verl_lora_run(tmp_path, model, lora)
    record = run / "global_step_5" / "actor" / "transformer_config.json"
    record.write_text(json.dumps({"tensor_model_parallel_size": 2, "num_layers": 2}))
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out")
    line = one_error_line(err)
    assert code == 1 and str(record) in line and "tensor_model_parallel_size=2" in line, err
    attention = {m: ab for m, ab in lora.items() if ".self_attn." in m}
    run = _verl_lora_run(tmp_path / "attention", model, attention)
    (run / "global_step_5" / "actor" / "transformer_config.json").write_text(record.read_text())
    out = tmp_path / "attention_out"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out)
    assert code == 0, stdout + err
    expected = _logits(_merged(model, attention))
    torch.testing.assert_close(logits_of(out, fixed_inputs(500)), expected, rtol=0, atol=1e-4)


def test_canonical_lora_exports_merged_and_as_a_peft_adapter(tmp_path):
    """Bridge's CanonicalLoRA adapts q, k, v and gate, up apart (`adapter.adapter_q.` ...),
    each B in its HF module's own row order; linear_proj / linear_fc2 as plain LoRA."""
    from peft import PeftModel

    model = tiny_causal_lm("qwen2", vocab=500)
    generator = torch.Generator().manual_seed(5)
    weights, lora, adapters = model.state_dict(), {}, {}
    canonical = {
        "q": ("self_attention.linear_qkv", "self_attn.q_proj"),
        "k": ("self_attention.linear_qkv", "self_attn.k_proj"),
        "v": ("self_attention.linear_qkv", "self_attn.v_proj"),
        "gate": ("mlp.linear_fc1", "mlp.gate_proj"),
        "up": ("mlp.linear_fc1", "mlp.up_proj"),
    }
    for layer in range(2):
        for sub, (part, hf) in canonical.items():
            rows, cols = weights[f"model.layers.{layer}.{hf}.weight"].shape
            a = torch.randn(RANK, cols, generator=generator) * 0.1
            b = torch.randn(rows, RANK, generator=generator) * 0.1
            lora[f"model.layers.{layer}.{hf}"] = (a, b)
            stem = f"module.decoder.layers.{layer}.{part}.adapter.adapter_{sub}."
            adapters |= {stem + "linear_in.weight": a, stem + "linear_out.weight": b}
    plain = _hf_lora(model, parts=("self_attention.linear_proj", "mlp.linear_fc2"))
    lora |= plain
    adapters |= _megatron_adapters(model, plain)
    run = _verl_lora_run(tmp_path, model, {})
    dcp = run / "global_step_5" / "actor" / "model" / "dist_ckpt"
    for file in dcp.iterdir():
        file.unlink()
    save_dcp({"model": {**mcore_weights(model), **adapters}}, dcp)
    code, stdout, _ = run_cli("ckpt", "inspect", run)
    assert f"Megatron canonical LoRA rank {RANK} on 14 modules" in stdout, stdout
    expected = _logits(_merged(model, lora))
    out = tmp_path / "merged"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out, "--verify")
    assert code == 0, stdout + err
    torch.testing.assert_close(logits_of(out, fixed_inputs(500)), expected, rtol=0, atol=1e-4)
    out = tmp_path / "adapter"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out, "--adapter-only")
    assert code == 0, stdout + err
    adapted = PeftModel.from_pretrained(tiny_causal_lm("qwen2", vocab=500), str(out)).eval()
    torch.testing.assert_close(_logits(adapted), expected, rtol=0, atol=1e-4)


def test_an_adapter_whose_rank_exceeds_its_weight_is_refused(tmp_path):
    """A rank above the adapted weight's sizes is no LoRA (and would size the reads and the
    output by a number the checkpoint's metadata alone claims)."""
    model = tiny_causal_lm("qwen2", vocab=500)
    lora = _hf_lora(model, parts=("self_attention.linear_proj",))
    wide = {
        m: (torch.zeros(300, a.shape[1]), torch.zeros(b.shape[0], 300))
        for m, (a, b) in lora.items()
    }
    run = _verl_lora_run(tmp_path, model, wide)
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out", "--adapter-only")
    line = one_error_line(err)
    assert code == 1 and "rank 300 exceeds the 128 x 128 weight" in line, err


def test_a_fused_fc1_and_te_norm_names_merge_the_same(tmp_path):
    """linear_fc1.weight fused as [gate; up] (no _w / _v split) and Transformer Engine's
    layer_norm_weight names: the adapter's deltas land on gate_proj / up_proj alike."""
    model = tiny_causal_lm("qwen3", vocab=500)
    lora = _hf_lora(model)
    base = {f"module.{k}": v for k, v in to_mcore(model, norms="te", fc1="fused").items()}
    run = _verl_lora_run(tmp_path, model, lora, base=base)
    out = tmp_path / "out"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out, "--verify")
    assert code == 0, stdout + err
    expected = _logits(_merged(model, lora))
    torch.testing.assert_close(logits_of(out, fixed_inputs(500)), expected, rtol=0, atol=1e-4)


# --------------------------------------------------------------------------- MTP layers
def _mtp_adapters(model) -> dict[str, torch.Tensor]:
    """Adapters on the MTP layer's transformer layer, as Bridge's target_modules (matched by
    module name) put them there: layer 0's adapter shapes under `mtp.layers.0.`."""
    first, mtp = "module.decoder.layers.0.", "module.mtp.layers.0.transformer_layer."
    generator = torch.Generator().manual_seed(3)
    return {
        name.replace(first, mtp): torch.randn(value.shape, generator=generator)
        for name, value in _megatron_adapters(model, _hf_lora(model)).items()
        if name.startswith(first)
    }


def _files(directory) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


def test_adapters_on_mtp_layers_are_dropped_with_them_merged_and_adapter_only(tmp_path):
    """Was: exit 2, "a Megatron PEFT adapter tensor on a module export-hf does not map".
    With --drop-mtp the merged export and the PEFT adapter are those of the same checkpoint
    saved without MTP layers (every file), and give the reference's logits."""
    from peft import PeftModel

    model = tiny_causal_lm("qwen2", vocab=500)
    lora = _hf_lora(model)
    mtp = {**mtp_weights(model, 1), **_mtp_adapters(model)}
    run = _verl_lora_run(tmp_path / "mtp", model, lora, base={**mcore_weights(model), **mtp})
    twin = _verl_lora_run(tmp_path / "twin", model, lora)
    for extra in ((), ("--adapter-only",)):
        code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "o", *extra)
        line = one_error_line(err)
        assert code == 1 and "[model.module.mtp.layers.0." in line and "--drop-mtp" in line, err
    expected = _logits(_merged(model, lora))
    for extra in ((), ("--adapter-only",)):
        out, twin_out = tmp_path / f"out{extra}", tmp_path / f"twin_out{extra}"
        args = ("--drop-mtp", "--verify", "--json", *extra)
        code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out, *args)
        assert code == 0, stdout + err
        result = json.loads(stdout)
        assert result["dropped_mtp"] == {"layers": 1, "tensors": len(mtp)}, result
        assert any(n.startswith("--drop-mtp: left out 1 multi") for n in result["notes"])
        assert run_cli("ckpt", "export-hf", twin, "--out", twin_out, *extra)[0] == 0
        assert _files(out) == _files(twin_out)
    torch.testing.assert_close(
        logits_of(tmp_path / "out()", fixed_inputs(500)), expected, rtol=0, atol=1e-4
    )
    base = tiny_causal_lm("qwen2", vocab=500)
    adapted = PeftModel.from_pretrained(base, str(tmp_path / "out('--adapter-only',)")).eval()
    torch.testing.assert_close(_logits(adapted), expected, rtol=0, atol=1e-4)
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 0 and "warning: [model.module.mtp.layers.0." in stdout, stdout + err


def test_adapter_only_needs_no_drop_mtp_when_no_adapter_lies_in_the_mtp_layers(tmp_path):
    """The PEFT adapter writes no base weight, so MTP base weights lose nothing there; the
    merged export, which would lose them, still asks for --drop-mtp."""
    model = tiny_causal_lm("llama", vocab=500)
    lora = _hf_lora(model)
    run = _verl_lora_run(
        tmp_path / "mtp", model, lora, base={**mcore_weights(model), **mtp_weights(model, 1)}
    )
    twin = _verl_lora_run(tmp_path / "twin", model, lora)
    out, twin_out = tmp_path / "adapter", tmp_path / "twin_adapter"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out, "--adapter-only")
    assert code == 0 and "--drop-mtp" not in err, stdout + err
    assert run_cli("ckpt", "export-hf", twin, "--out", twin_out, "--adapter-only")[0] == 0
    assert _files(out) == _files(twin_out)
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "merged")
    assert code == 1 and "--drop-mtp" in one_error_line(err), err


def test_a_bridge_adapter_with_mtp_adapters_merges_onto_its_base_with_drop_mtp(tmp_path):
    model = tiny_causal_lm("llama", vocab=500)
    lora = _hf_lora(model)
    run, step = _bridge_lora_run(tmp_path, model, lora, BRIDGE_PEFT)
    for file in [*step.glob("*.distcp"), step / ".metadata"]:
        file.unlink()
    adapters = {**_megatron_adapters(model, lora), **_mtp_adapters(model)}
    save_dcp({"model": adapters, "checkpoint_version": 3.0, "iteration": 10}, step)
    base = tmp_path / "base"
    model.save_pretrained(base)
    args = ("ckpt", "export-hf", run, "--hf-config", base)
    code, _, err = run_cli(*args, "--out", tmp_path / "refused")
    assert code == 1 and "--drop-mtp" in one_error_line(err), err
    out = tmp_path / "out"
    code, stdout, err = run_cli(*args, "--out", out, "--drop-mtp", "--verify")
    assert code == 0 and "note: --drop-mtp: left out 1 multi" in err, stdout + err
    expected = _logits(_merged(model, lora))
    torch.testing.assert_close(logits_of(out, fixed_inputs(500)), expected, rtol=0, atol=1e-4)


def test_adapters_on_mtp_layers_alone_leave_nothing_to_export(tmp_path):
    model = tiny_causal_lm("qwen2", vocab=500)
    run = _verl_lora_run(tmp_path, model, {}, base={**mcore_weights(model), **_mtp_adapters(model)})
    out = tmp_path / "adapter"
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", out, "--adapter-only", "--drop-mtp")
    line = one_error_line(err)
    assert code == 2 and "adapter tensors all lie in the 1 multi-token prediction" in line, err
    assert not out.exists()


def _exported_alpha(run, out, *flags: str) -> tuple[int, float | None, str]:
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", out, "--adapter-only", *flags)
    written = out / "adapter_config.json"
    alpha = json.loads(written.read_text())["lora_alpha"] if written.exists() else None
    return code, alpha, err


def test_lora_alpha_must_agree_with_what_the_checkpoint_records(tmp_path):
    """run_config.yaml's peft alpha and the PEFT adapter saved beside it are the run's own
    records: a --lora-alpha neither of them gives is refused (a habitual 32 against a
    recorded 8 merged 4x the trained update, exit 0); records that disagree are refused unless
    --lora-alpha picks one; a peft section without alpha leaves it to the saved adapter."""
    model = tiny_causal_lm("qwen2", vocab=500)
    run, step = _bridge_lora_run(tmp_path, model, _hf_lora(model), BRIDGE_PEFT)
    code, alpha, err = _exported_alpha(run, tmp_path / "a", "--lora-alpha", "32")
    line = one_error_line(err)
    assert (code, alpha) == (2, None), err
    assert line.startswith("error: --lora-alpha 32: ") and "run_config.yaml peft" in line, err
    assert f"records alpha {ALPHA:g}" in line and "leave --lora-alpha out" in line, err
    assert _exported_alpha(run, tmp_path / "b", "--lora-alpha", f"{ALPHA:g}")[:2] == (0, ALPHA)
    near = ALPHA + 1e-7  # refused, and never shown rounded to the alpha it is not
    code, _, err = _exported_alpha(run, tmp_path / "n", "--lora-alpha", repr(near))
    assert code == 2 and f"--lora-alpha {near!r}: " in one_error_line(err), err

    (step / "hf").mkdir()
    saved = step / "hf" / "adapter_config.json"
    saved.write_text(json.dumps({"peft_type": "LORA", "r": RANK, "lora_alpha": 2 * ALPHA}))
    code, alpha, err = _exported_alpha(run, tmp_path / "c")
    line = one_error_line(err)
    assert (code, alpha) == (2, None) and "disagree" in line, err
    assert f"{saved} records alpha {2 * ALPHA:g}" in line and "--lora-alpha A" in line, err
    picked = _exported_alpha(run, tmp_path / "d", "--lora-alpha", f"{2 * ALPHA:g}")
    assert picked[:2] == (0, 2 * ALPHA), picked[2]

    no_alpha = {key: value for key, value in BRIDGE_PEFT.items() if key != "alpha"}
    config = yaml.safe_load((step / "run_config.yaml").read_text())
    (step / "run_config.yaml").write_text(yaml.safe_dump({**config, "peft": no_alpha}))
    code, alpha, err = _exported_alpha(run, tmp_path / "e")
    assert (code, alpha) == (0, 2 * ALPHA) and f"from {saved}" in err, err


# Adapter tensors export-hf refuses under any config or flag: on the output layer, the
# embedding, a bias of an adapter, DoRA's magnitude, a second adapter on one module
REFUSED_PLACEMENTS = {
    "output layer": ("module.output_layer.adapter.linear_in.weight", (RANK, 128)),
    "embedding": ("module.embedding.word_embeddings.adapter.linear_in.weight", (RANK, 500)),
    "bias": ("module.decoder.layers.0.self_attention.linear_qkv.adapter.linear_out.bias", (64,)),
    "DoRA": ("module.decoder.layers.0.mlp.linear_fc2.adapter.weight_magnitude", (128,)),
    "second adapter": (
        "module.decoder.layers.0.mlp.linear_fc2.adapters.b.linear_in.weight",
        (4, 4),
    ),
}


def _with_adapter_tensor(tmp_path, model, saved: str, extra: dict[str, torch.Tensor | None]):
    """A Bridge adapter-only save (`saved` "bridge") or a verl save of adapter and base, its
    adapter as `_megatron_adapters` draws it plus `extra` (None: that tensor left out):
    (run, the DCP dir)."""
    lora = _hf_lora(model)
    if saved == "bridge":
        run, dcp = _bridge_lora_run(tmp_path, model, lora, BRIDGE_PEFT)
        state = {"checkpoint_version": 3.0, "iteration": 10}
        weights = _megatron_adapters(model, lora)
    else:
        run = _verl_lora_run(tmp_path, model, lora)
        dcp, state = run / "global_step_5" / "actor" / "model" / "dist_ckpt", {}
        weights = {**mcore_weights(model), **_megatron_adapters(model, lora)}
    for file in [*dcp.glob("*.distcp"), dcp / ".metadata"]:
        file.unlink()
    model_state = {key: t for key, t in {**weights, **extra}.items() if t is not None}
    save_dcp({"model": model_state, **state}, dcp)
    return run, dcp


@pytest.mark.parametrize("saved", ["bridge", "verl"])
@pytest.mark.parametrize("case", [None, *REFUSED_PLACEMENTS])
def test_validate_fails_on_every_adapter_placement_export_refuses(tmp_path, saved, case):
    """Was: validate exit 0 with a warning ("adapter not checked against this config") on
    adapters export-hf then refused (exit 2). Now validate fails exactly where export does,
    through export's own rules, in one error line naming the checkpoint and the key."""
    model = tiny_causal_lm("qwen2", vocab=500)
    key, shape = REFUSED_PLACEMENTS[case] if case else ("", ())
    run, dcp = _with_adapter_tensor(tmp_path, model, saved, {key: torch.ones(shape)} if key else {})
    model.save_pretrained(tmp_path / "base")
    exported = [
        run_cli("ckpt", "export-hf", run, "--out", tmp_path / f"out{i}", *flags)[0]
        for i, flags in enumerate([("--adapter-only",), ("--hf-config", tmp_path / "base")])
        if saved == "bridge" or not flags[0].startswith("--hf")
    ]
    code, stdout, err = run_cli("ckpt", "validate", run)
    errors = [line for line in stdout.splitlines() if line.startswith("error:")]
    if case is None:
        assert exported == [0] * len(exported) and code == 0 and not errors, stdout + err
        return
    assert all(exit_code == 2 for exit_code in exported), exported
    assert code == 1 and len(errors) == 1, stdout + err
    assert errors[0].startswith(f"error: {dcp}: export-hf refuses this adapter: [model.{key}]")
    assert "warning:" not in stdout, stdout
    # intact, refused by export's rule: not damage (test_validate_unsupported_verdict.py)
    assert stdout.splitlines()[-1].startswith(f"UNSUPPORTED: {dcp} (intact; export-hf"), stdout


# Adapters damaged, not of a kind export refuses: each read "UNSUPPORTED ... (intact; ...)"
_PROJ = "module.decoder.layers.0.self_attention.linear_proj.adapter."
DAMAGED_ADAPTERS: dict[str, dict[str, torch.Tensor | None]] = {
    "half of an A/B pair gone": {f"{_PROJ}linear_out.weight": None},
    "mixed ranks": {
        f"{_PROJ}linear_in.weight": torch.ones(RANK // 2, 128),
        f"{_PROJ}linear_out.weight": torch.ones(128, RANK // 2),
    },
    "PEFT tensors beside Megatron ones": {
        "module.model.layers.0.self_attn.q_proj.lora_A.weight": torch.ones(RANK, 128)
    },
    # a kind export refuses beside the damage: was UNSUPPORTED, DoRA refused before pairing
    "DoRA beside half of an A/B pair gone": {
        f"{_PROJ}linear_in.weight": None,
        "module.decoder.layers.0.mlp.linear_fc2.adapter.weight_magnitude": torch.ones(128),
    },
}


@pytest.mark.parametrize("saved", ["bridge", "verl"])
@pytest.mark.parametrize("case", list(DAMAGED_ADAPTERS))
def test_a_damaged_adapter_is_invalid_not_unsupported(tmp_path, saved, case):
    """Damage wins: UNSUPPORTED is export refusing a kind of adapter (REFUSED_PLACEMENTS),
    never an adapter that lost a tensor or mixes what one adapter cannot hold."""
    model = tiny_causal_lm("qwen2", vocab=500)
    run, dcp = _with_adapter_tensor(tmp_path, model, saved, DAMAGED_ADAPTERS[case])
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 1 and stdout.splitlines()[-1].startswith(f"INVALID: {dcp} "), stdout + err
    assert "intact" not in stdout, stdout
    code, stdout, _ = run_cli("ckpt", "validate", run, "--json")
    assert code == 1 and json.loads(stdout)["verdict"] == "invalid", stdout


@pytest.mark.parametrize(
    ("record", "says"),
    [
        ("dora", "_target_ 'megatron.bridge.peft.dora.DoRA' is not plain LoRA"),
        ("rank", "r 16, but the checkpoint's adapter tensors have rank 4"),
        ("rslora", "use_rslora True"),
    ],
)
def test_validate_fails_on_an_adapter_record_export_refuses(tmp_path, record, says):
    """What the checkpoint records of its adapter (run_config.yaml's peft, the adapter_config
    saved beside it) was read by export alone: validate passed a DoRA run or a saved adapter
    of another rank that every export refused, whatever --lora-alpha."""
    model = tiny_causal_lm("qwen2", vocab=500)
    lora = _hf_lora(model)
    if record == "dora":
        dora = {**BRIDGE_PEFT, "_target_": "megatron.bridge.peft.dora.DoRA"}
        run, step = _bridge_lora_run(tmp_path, model, lora, dora)
        named = step / "run_config.yaml"
    else:
        run = _verl_lora_run(tmp_path, model, lora)
        named = next(run.rglob("adapter_config.json"))
        saved = {"peft_type": "LORA", "r": 16 if record == "rank" else RANK, "lora_alpha": 8}
        named.write_text(json.dumps({**saved, "use_rslora": record == "rslora"}))
    for flags in ((), ("--lora-alpha", "8")):
        args = ("--adapter-only", *flags)
        code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "out", *args)
        assert code == 2 and str(named) in one_error_line(err) and says in err, err
    code, stdout, err = run_cli("ckpt", "validate", run)
    errors = [line for line in stdout.splitlines() if line.startswith("error:")]
    assert code == 1 and len(errors) == 1, stdout + err
    assert "export-hf refuses this adapter" in errors[0] and f"{named}" in errors[0], errors
    assert says in errors[0], errors
    # a rank that contradicts the tensors is damage; a variant is export's rule
    verdict = "INVALID: " if record == "rank" else "UNSUPPORTED: "
    assert stdout.splitlines()[-1].startswith(verdict), stdout
