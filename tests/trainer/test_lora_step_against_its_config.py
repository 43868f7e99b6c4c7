"""A LoRA step against the model config it adapts. `validate --hf-config` checked nothing of
an mfsdp LoRA step against the config (a config of another hidden size passed, and the
merged export then refused it), and the merged export wrote every tensor of the base, even
those the model the step's config describes does not have (a base of 2 layers trained
under `model.overrides={num_hidden_layers: 1}`: a config of 1 layer over the tensors of 2,
which vLLM refuses and transformers loads with 12 unexpected keys)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.support.ckpt_edits import rehash
from tests.support.export import fixed_inputs, load_report, logits_of
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.sft import run_sft
from trainer.tiny import build_tiny_model_dir

ONE_LAYER = "model.overrides={num_hidden_layers: 1}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """Three one-step LoRA runs of the tiny 2-layer base (`base`): `run` as it is, `k_only`
    with adapters on k_proj alone, `one_layer` under ONE_LAYER."""
    root = tmp_path_factory.mktemp("lora_against_config")
    base = build_tiny_model_dir(root / "base", seed=0, with_weights=True)
    chat = write_chat_jsonl(root / "train.jsonl", rows=8)
    lora = (f"model.path={base}", "model.lora_rank=4", "optim.lr=1e-2", "data.global_batch_size=4")
    run_sft(tiny_config(chat, root / "run", *lora, "trainer.total_steps=1"))
    k_only = ("model.target_modules=[k_proj]", "trainer.total_steps=1")
    run_sft(tiny_config(chat, root / "k_only", *lora, *k_only))
    run_sft(tiny_config(chat, root / "one_layer", *lora, ONE_LAYER, "trainer.total_steps=1"))
    return root


def _config_with(runs: Path, name: str, **fields) -> Path:
    data = json.loads((runs / "base" / "config.json").read_text())
    (runs / name).write_text(json.dumps({**data, **fields}))
    return runs / name


def _validate(run: Path, *flags) -> tuple[int, list[str]]:
    code, stdout, err = run_cli("ckpt", "validate", run, *flags)
    return code, [line for line in (stdout + err).splitlines() if line.startswith("error: ")]


def test_validate_checks_the_adapters_against_its_own_config_and_a_given_one(runs):
    run, base = runs / "run", runs / "base"
    assert _validate(run) == (0, [])
    assert _validate(run, "--hf-config", base) == (0, [])
    wider = _config_with(runs, "wider.json", hidden_size=256, intermediate_size=512)
    code, errors = _validate(run, "--hf-config", wider)
    assert code == 1
    assert any(f"{wider}: hidden_size=256 (own: 128)" in line for line in errors), errors
    assert any(
        line.startswith(f"error: {wider}: 14 adapters do not fit it (qwen2), e.g. [")
        and "B @ A adds (128, 256) to model.layers.0.mlp.down_proj.weight;"
        f" {wider} gives it (256, 512)"
        in line
        for line in errors
    ), errors


def test_a_few_adapters_that_do_not_fit_are_each_named(runs):
    """Fewer key/value heads reshape k_proj alone: each of its 2 adapters is named with the
    weight it adds to."""
    fewer = _config_with(runs, "kv.json", num_key_value_heads=1)
    code, errors = _validate(runs / "k_only", "--hf-config", fewer)
    assert code == 1
    module = "model.layers.{}.self_attn.k_proj"
    assert [line for line in errors if "B @ A adds" in line] == [
        f"error: [model.{module.format(layer)}.lora_B.default.weight]: B @ A adds (64, 128) to"
        f" {module.format(layer)}.weight; {fewer} gives it (32, 128)"
        for layer in (0, 1)
    ], errors


def test_the_merged_export_writes_the_model_its_config_describes(runs, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run, out = runs / "one_layer", tmp_path
    code, _stdout, err = run_cli("ckpt", "export-hf", run, "--out", out / "merged", "--verify")
    assert code == 0, err
    assert "12 base tensor(s) the config's model (qwen2) does not have left out" in err, err
    assert "model.layers.1.input_layernorm.weight" in err
    assert load_report(out / "merged") == {}  # no key unexpected, missing or mismatched
    code, _stdout, err = run_cli("ckpt", "export-hf", run, "--out", out / "a", "--adapter-only")
    assert code == 0, err

    base = AutoModelForCausalLM.from_pretrained(
        str(runs / "base"), num_hidden_layers=1, dtype=torch.float32
    )
    inputs = fixed_inputs(base.config.vocab_size)
    peft = PeftModel.from_pretrained(base, str(out / "a")).eval()
    with torch.no_grad():
        expected = peft(input_ids=inputs).logits
    torch.testing.assert_close(
        logits_of(out / "merged", inputs, torch.float32), expected, atol=1e-5, rtol=0
    )


def test_a_base_that_lacks_a_weight_of_the_configs_model_is_refused(runs, tmp_path):
    """A step whose config names more layers than its base holds (its huggingface/config.json
    edited, the manifest's record of it made anew): the merge would write a model missing
    weights, which transformers fills at random."""
    run = Path(shutil.copytree(runs / "run", tmp_path / "run"))
    config = run / "global_step_1" / "huggingface" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "num_hidden_layers": 3}))
    rehash(run / "global_step_1", "huggingface/config.json")
    code, _stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "m")
    assert code == 1, err
    assert one_error_line(err) == (
        f"error: {runs / 'base'}: weights lack 12 tensor(s) config.json needs, e.g."
        " model.layers.2.input_layernorm.weight"
    )
    assert not (tmp_path / "m").exists()
