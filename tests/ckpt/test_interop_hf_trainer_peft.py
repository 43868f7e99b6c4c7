"""Hugging Face Trainer (and TRL) LoRA runs with FSDP's SHARDED_STATE_DICT save the PEFT
model's adapter alone: `checkpoint-N/pytorch_model_fsdp_0/` holds
`get_peft_model_state_dict`'s tensors (`model.base_model.model.model.layers.0.self_attn.
q_proj.lora_A.weight`, ...) and no base weights. export-hf merges them onto the base model
in `--hf-config BASE_DIR` or writes them as a PEFT adapter (`--adapter-only`), alpha from
the `adapter_config.json` saved in checkpoint-N or `--lora-alpha`, never guessed. The
reference is peft's own model: its logits before the save."""

from __future__ import annotations

import copy
import json
import shutil
import warnings

import pytest
import torch
from safetensors.torch import load_file

from tests.support.export import fixed_inputs, load_report, logits_of
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import save_dcp

TARGETS = ["q_proj", "v_proj", "down_proj"]
RANK, ALPHA = 4, 16


@pytest.fixture(scope="module")
def trainer_run(tmp_path_factory):
    """OUTPUT/checkpoint-5 of a PEFT LoRA run as the Trainer saves it, the base model's dir,
    and the PEFT model's logits on fixed inputs."""
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

    root = tmp_path_factory.mktemp("trainer_peft")
    base = tiny_causal_lm("qwen2")
    base.save_pretrained(root / "base")
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=TARGETS, init_lora_weights=False)
    torch.manual_seed(3)
    peft_model = get_peft_model(copy.deepcopy(base), config).eval()
    checkpoint = root / "out" / "checkpoint-5"
    adapter = get_peft_model_state_dict(peft_model)
    save_dcp({"model": adapter}, checkpoint / "pytorch_model_fsdp_0")
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 5}))
    peft_model.peft_config["default"].save_pretrained(str(checkpoint))  # adapter_config.json
    ids = fixed_inputs(base.config.vocab_size)
    with torch.no_grad():
        expected = peft_model(input_ids=ids).logits
    return root, ids, expected, adapter


def test_merged_onto_the_base_gives_the_peft_models_logits(trainer_run, tmp_path):
    root, ids, expected, _ = trainer_run
    out = tmp_path / "merged"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", root / "out", "--out", out, "--hf-config", root / "base"
    )
    assert code == 0, stdout + err
    assert f"LoRA alpha {ALPHA} from {root / 'out' / 'checkpoint-5' / 'adapter_config.json'}" in err
    assert load_report(out) == {}
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)


def test_adapter_only_loads_in_peft_with_the_same_logits(trainer_run, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    root, ids, expected, _ = trainer_run
    out = tmp_path / "adapter"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", root / "out", "--out", out, "--adapter-only",
        "--hf-config", root / "base",
    )  # fmt: skip
    assert code == 0, stdout + err
    saved = load_file(out / "adapter_model.safetensors")
    assert len(saved) == 2 * 2 * len(TARGETS)
    assert "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight" in saved
    settings = json.loads((out / "adapter_config.json").read_text())
    assert (settings["r"], settings["lora_alpha"]) == (RANK, ALPHA)
    base = AutoModelForCausalLM.from_pretrained(root / "base")
    model = PeftModel.from_pretrained(base, str(out)).eval()
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, expected, rtol=0, atol=1e-5)


def test_without_a_saved_alpha_lora_alpha_is_asked_for_then_used(trainer_run, tmp_path):
    root, ids, expected, _ = trainer_run
    run = tmp_path / "out"
    shutil.copytree(root / "out", run)
    (run / "checkpoint-5" / "adapter_config.json").unlink()
    args = ("ckpt", "export-hf", run, "--hf-config", root / "base")
    code, _, err = run_cli(*args, "--out", tmp_path / "x")
    line = one_error_line(err)
    assert code == 2 and "a LoRA adapter of rank 4 on 6 Hugging Face module(s)" in line, err
    assert "--lora-alpha A" in line and not (tmp_path / "x").exists()
    code, stdout, err = run_cli(*args, "--out", tmp_path / "m", "--lora-alpha", ALPHA)
    assert code == 0, stdout + err
    torch.testing.assert_close(logits_of(tmp_path / "m", ids), expected, rtol=0, atol=1e-5)


def test_a_stray_safetensors_in_the_base_dir_is_not_merged(trainer_run, tmp_path):
    """transformers loads model.safetensors alone; the merge read every *.safetensors there,
    the last name in sorted order winning (model_old's weights) and a Mistral-style
    consolidated file's own tensors copied in."""
    from safetensors.torch import save_file

    root, ids, expected, _ = trainer_run
    base = shutil.copytree(root / "base", tmp_path / "base")
    weights = load_file(base / "model.safetensors")
    save_file({name: t + 1 for name, t in weights.items()}, base / "model_old.safetensors")
    save_file({"tok_embeddings.weight": torch.ones(4)}, base / "consolidated.safetensors")
    out = tmp_path / "merged"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", root / "out", "--out", out, "--hf-config", base
    )
    assert code == 0, stdout + err
    assert load_report(out) == {}
    assert sorted(load_file(out / "model.safetensors")) == sorted(weights)
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)


def test_an_adapter_peft_saved_under_its_name_has_its_alpha_read(trainer_run, tmp_path):
    """peft saves an adapter not named "default" in checkpoint-N/<name>/: export asked for
    --lora-alpha though the saved config holds it."""
    root, ids, expected, _ = trainer_run
    run = shutil.copytree(root / "out", tmp_path / "out")
    (run / "checkpoint-5" / "sft").mkdir()
    named = run / "checkpoint-5" / "sft" / "adapter_config.json"
    (run / "checkpoint-5" / "adapter_config.json").rename(named)
    for flags in ([], ["--adapter-only"]):
        out = tmp_path / f"export{len(flags)}"
        args = ("ckpt", "export-hf", run, "--out", out, "--hf-config", root / "base", *flags)
        code, stdout, err = run_cli(*args)
        assert code == 0 and f"LoRA alpha {ALPHA} from {named}" in err, stdout + err
    torch.testing.assert_close(logits_of(tmp_path / "export0", ids), expected, rtol=0, atol=1e-5)
    settings = json.loads((tmp_path / "export1" / "adapter_config.json").read_text())
    assert settings["lora_alpha"] == ALPHA


def test_inspect_and_validate_name_the_adapter(trainer_run):
    root, _, _, _ = trainer_run
    summary = "PEFT LoRA rank 4 on 6 modules (down_proj, q_proj, v_proj), adapter only, no base"
    code, stdout, _ = run_cli("ckpt", "inspect", root / "out")
    assert code == 0 and summary in stdout, stdout
    code, stdout, _ = run_cli("ckpt", "validate", root / "out")
    assert code == 0 and summary in stdout, stdout
    code, stdout, _ = run_cli("ckpt", "validate", root / "out", "--hf-config", root / "base")
    assert code == 0 and "warning:" not in stdout and summary in stdout, stdout  # shapes fit


def test_validate_checks_the_adapter_against_the_config(trainer_run, tmp_path):
    """Each lora_A / lora_B against the weight the config gives its module: the base of
    another width does not fit it."""
    root, _, _, _ = trainer_run
    tiny_causal_lm("qwen2", hidden_size=64).save_pretrained(tmp_path / "narrow")
    code, stdout, _ = run_cli("ckpt", "validate", root / "out", "--hf-config", tmp_path / "narrow")
    assert code == 1 and "error:" in stdout and "the adapter does not fit this config" in stdout
    assert "does not fit the" in stdout and "INVALID" in stdout, stdout


@pytest.mark.parametrize(
    "extra, named",
    [
        ("model.layers.0.self_attn.q_proj.lora_magnitude_vector", "DoRA"),
        ("model.embed_tokens.lora_embedding_A", "LoRA on an embedding"),
    ],
)
def test_peft_variants_are_refused_by_name(trainer_run, tmp_path, extra, named):
    """Exported as plain LoRA they would write a different model."""
    root, _, _, adapter = trainer_run
    run = tmp_path / "out"
    shutil.copytree(root / "out", run, ignore=shutil.ignore_patterns("pytorch_model_fsdp_0"))
    state = {**adapter, f"base_model.model.{extra}": torch.ones(4)}
    save_dcp({"model": state}, run / "checkpoint-5" / "pytorch_model_fsdp_0")
    for flags in ([], ["--adapter-only"]):
        code, _, err = run_cli(
            "ckpt", "export-hf", run, "--out", tmp_path / "x", "--hf-config", root / "base", *flags
        )
        line = one_error_line(err)
        assert code in (1, 2) and named in line and "plain LoRA (lora_A / lora_B)" in line, err


def test_an_adapter_config_of_another_rank_is_refused(trainer_run, tmp_path):
    root, _, _, _ = trainer_run
    run = tmp_path / "out"
    shutil.copytree(root / "out", run)
    config = run / "checkpoint-5" / "adapter_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "r": 8}))
    code, _, err = run_cli(
        "ckpt", "export-hf", run, "--out", tmp_path / "x", "--hf-config", root / "base"
    )
    line = one_error_line(err)
    assert code == 2 and "r 8, but the checkpoint's adapter tensors have rank 4" in line, err


def test_an_unpaired_lora_a_is_refused_naming_it(trainer_run, tmp_path):
    root, _, _, adapter = trainer_run
    run = tmp_path / "out"
    shutil.copytree(root / "out", run, ignore=shutil.ignore_patterns("pytorch_model_fsdp_0"))
    lone = "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"
    state = {name: value for name, value in adapter.items() if name != lone}
    save_dcp({"model": state}, run / "checkpoint-5" / "pytorch_model_fsdp_0")
    code, _, err = run_cli(
        "ckpt", "export-hf", run, "--out", tmp_path / "x", "--hf-config", root / "base"
    )
    line = one_error_line(err)
    assert code == 2 and "v_proj.lora_A.weight]: lora_A only, not both lora_A and lora_B" in line


def test_an_adapter_of_rank_0_is_refused_not_divided_by(trainer_run, tmp_path):
    """Its scale lora_alpha / r divided by zero (a traceback, Megatron's adapters alike)."""
    root, _, _, adapter = trainer_run
    run = tmp_path / "out"
    shutil.copytree(root / "out", run, ignore=shutil.ignore_patterns("pytorch_model_fsdp_0"))
    empty = {
        name: value[:0] if ".lora_A." in name else value[:, :0] for name, value in adapter.items()
    }
    save_dcp({"model": empty}, run / "checkpoint-5" / "pytorch_model_fsdp_0")
    args = ("--hf-config", root / "base", "--lora-alpha", ALPHA)
    for flags in ([], ["--adapter-only"]):
        code, _, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "x", *args, *flags)
        line = one_error_line(err)
        assert code == 1 and "adapters of rank 0 (no rows in A)" in line, err
    code, stdout, _ = run_cli("ckpt", "validate", run, "--hf-config", root / "base")
    assert code == 1 and "adapters of rank 0" in stdout and "INVALID" in stdout, stdout


def test_a_live_peft_models_state_dict_is_named_with_what_export_reads(trainer_run, tmp_path):
    """`dcp.save({"model": peft_model.state_dict()})` (base_layer, lora_A.default): not the
    names of a saved adapter; the error says which saves export reads."""
    from peft import LoraConfig, get_peft_model

    root, _, _, _ = trainer_run
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=TARGETS)
    live = get_peft_model(tiny_causal_lm("qwen2"), config)
    run = tmp_path / "out" / "checkpoint-5"
    save_dcp({"model": live.state_dict()}, run / "pytorch_model_fsdp_0")
    (run / "trainer_state.json").write_text(json.dumps({"global_step": 5}))
    code, _, err = run_cli(
        "ckpt", "export-hf", tmp_path / "out", "--out", tmp_path / "x", "--hf-config", root / "base"
    )
    line = one_error_line(err)
    assert code == 2 and "unknown to qwen2" in line and "live PEFT model's names" in line, err
    assert "get_peft_model_state_dict" in line and "merge_and_unload()" in line


def test_adapter_only_on_a_live_peft_models_state_dict_says_what_export_reads(
    trainer_run, tmp_path
):
    """Of an adapter named "sft" (lora_A.sft.weight): --adapter-only said only "not a ...
    LoRA checkpoint", where the merged export names the saves it reads."""
    from peft import LoraConfig, get_peft_model

    root, _, _, _ = trainer_run
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=TARGETS)
    live = get_peft_model(tiny_causal_lm("qwen2"), config, adapter_name="sft")
    run = tmp_path / "out" / "checkpoint-5"
    save_dcp({"model": live.state_dict()}, run / "pytorch_model_fsdp_0")
    (run / "trainer_state.json").write_text(json.dumps({"global_step": 5}))
    args = ("--hf-config", root / "base", "--adapter-only")
    code, _, err = run_cli("ckpt", "export-hf", tmp_path / "out", "--out", tmp_path / "x", *args)
    line = one_error_line(err)
    assert code == 2 and "live PEFT model's names" in line, err
    assert "get_peft_model_state_dict" in line and "merge_and_unload()" in line


def test_a_rank_above_the_weights_sizes_is_refused(trainer_run, tmp_path):
    """The same check as Megatron's adapters get: a rank past both sizes is no LoRA."""
    root, _, _, adapter = trainer_run
    run = tmp_path / "out"
    shutil.copytree(root / "out", run, ignore=shutil.ignore_patterns("pytorch_model_fsdp_0"))
    module = "base_model.model.model.layers.0.self_attn.q_proj"
    state = {
        **adapter,
        f"{module}.lora_A.weight": torch.ones(300, 128),
        f"{module}.lora_B.weight": torch.ones(128, 300),
    }
    save_dcp({"model": state}, run / "checkpoint-5" / "pytorch_model_fsdp_0")
    code, _, err = run_cli(
        "ckpt", "export-hf", run, "--out", tmp_path / "x", "--hf-config", root / "base"
    )
    line = one_error_line(err)
    assert code == 1 and "rank 300 exceeds the 128 x 128 weight it adapts" in line, err


def _trainer_checkpoint(root, base, **settings):
    """checkpoint-5 of a PEFT run with LoraConfig(**settings) saved as the Trainer saves it."""
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

    config = LoraConfig(**{"r": RANK, "lora_alpha": ALPHA, "target_modules": TARGETS, **settings})
    torch.manual_seed(3)
    peft_model = get_peft_model(copy.deepcopy(base), config)
    checkpoint = root / "out" / "checkpoint-5"
    save_dcp({"model": get_peft_model_state_dict(peft_model)}, checkpoint / "pytorch_model_fsdp_0")
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 5}))
    peft_model.peft_config["default"].save_pretrained(str(checkpoint))
    return root / "out"


# peft settings under which the model is not W + alpha / r * B @ A on the saved pairs: each
# was merged or written as an adapter without a word (logits off by 0.07 to 2.8)
UNSUPPORTED = {
    "alpha_pattern": ({"alpha_pattern": {"v_proj": 64}}, "alpha_pattern {'v_proj': 64}"),
    "rslora_with_lora_alpha": ({"use_rslora": True}, "use_rslora True"),
    "modules_to_save": ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
    "bias": ({"bias": "lora_only"}, 'a trained bias (peft\'s bias="lora_only" or "all")'),
    "lora_bias": ({"lora_bias": True}, "a bias on lora_B (peft's lora_bias=True)"),
    "olora": ({"init_lora_weights": "olora"}, "init_lora_weights 'olora' is not plain LoRA's"),
    "eva": ({"init_lora_weights": "eva"}, "init_lora_weights 'eva' is not plain LoRA's"),
}


@pytest.mark.parametrize("case", list(UNSUPPORTED))
def test_peft_settings_export_cannot_reproduce_are_refused_naming_them(trainer_run, case, tmp_path):
    root, _, _, _ = trainer_run
    settings, words = UNSUPPORTED[case]
    base = tiny_causal_lm("qwen2")
    with warnings.catch_warnings():  # peft warns of lora_B.bias shapes it saves itself
        warnings.simplefilter("ignore")
        run = _trainer_checkpoint(tmp_path, base, **settings)
    alpha = ["--lora-alpha", ALPHA] if case == "rslora_with_lora_alpha" else []
    for mode in ([], ["--adapter-only"]):
        out = tmp_path / f"export{len(mode)}"
        code, stdout, err = run_cli(
            "ckpt", "export-hf", run, "--out", out, "--hf-config", root / "base", *alpha, *mode
        )
        line = one_error_line(err)
        assert code == 2 and words in line, (mode, stdout + err)
        assert not out.exists()


def test_lora_on_fused_expert_parameters_is_named():
    """peft's target_parameters on transformers 5.x's fused experts: was "the config has no
    model.layers.0.mlp.experts.weight"."""
    from mfsdp_ckpt.convert.megatron_lora import AdapterWeightsError, split_adapters
    from mfsdp_ckpt.format.dtypes import FLOAT32

    stored = {f"model.layers.0.mlp.experts.lora_{w}.weight": f"k{w}" for w in "AB"}
    with pytest.raises(AdapterWeightsError, match="LoRA on the fused expert parameters"):
        split_adapters(
            dict.fromkeys(stored, (4, 8)), stored, dict.fromkeys(stored.values(), FLOAT32)
        )


def _validate_verdict(run, *flags) -> tuple[int, str, str]:
    """(exit code, validate's verdict line, its --json verdict)."""
    code, stdout, err = run_cli("ckpt", "validate", run, *flags)
    json_code, json_out, _ = run_cli("ckpt", "validate", run, "--json", *flags)
    assert json_code == code, stdout + err + json_out
    return code, stdout.splitlines()[-1], json.loads(json_out)["verdict"]


def test_dora_beside_an_unpaired_lora_b_is_invalid(trainer_run, tmp_path):
    """Damage wins whatever the kind: was UNSUPPORTED ("intact; ... DoRA"), the magnitude
    vector refused before the lone lora_B was seen."""
    root, _, _, adapter = trainer_run
    run = tmp_path / "out"
    shutil.copytree(root / "out", run, ignore=shutil.ignore_patterns("pytorch_model_fsdp_0"))
    lone = "base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight"
    magnitude = "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector"
    state = {name: value for name, value in adapter.items() if name != lone}
    save_dcp(
        {"model": {**state, magnitude: torch.ones(128)}},
        run / "checkpoint-5" / "pytorch_model_fsdp_0",
    )
    code, verdict, json_verdict = _validate_verdict(run, "--hf-config", root / "base")
    assert code == 1 and verdict.startswith("INVALID: "), verdict
    assert json_verdict == "invalid" and "intact" not in verdict, verdict


# adapter_config.json values of another JSON type than peft writes: damage, each was read as
# a kind (a truthy "yes" as DoRA, "true" as rslora: UNSUPPORTED) or as another rank
WRONG_TYPES = {"use_dora": "yes", "r": "4", "lora_alpha": "16", "use_rslora": "true"}


@pytest.mark.parametrize("key", list(WRONG_TYPES))
def test_a_wrong_typed_adapter_config_value_is_invalid_naming_it(trainer_run, tmp_path, key):
    root, _, _, _ = trainer_run
    run = tmp_path / "out"
    shutil.copytree(root / "out", run)
    config = run / "checkpoint-5" / "adapter_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), key: WRONG_TYPES[key]}))
    said = f"{config}: {key!r} is {WRONG_TYPES[key]!r}, not "
    code, verdict, json_verdict = _validate_verdict(run, "--hf-config", root / "base")
    assert code == 1 and verdict.startswith("INVALID: "), verdict
    assert json_verdict == "invalid", verdict
    _, stdout, _ = run_cli("ckpt", "validate", run, "--hf-config", root / "base")
    assert said in stdout, stdout
    code, _, err = run_cli(
        "ckpt", "export-hf", run, "--out", tmp_path / "x", "--hf-config", root / "base"
    )
    assert code == 1 and said in one_error_line(err), err


# peft's rank_pattern gives modules a rank other than r: an intact adapter of several ranks
# that its adapter_config.json declares, a kind export does not convert. Each was INVALID
# ("adapters of ranks [4, 8] in one checkpoint"), hiding DoRA or an embedding beside it.
RANK_PATTERN = {"v_proj": 8}
DECLARED_RANKS = {
    "rank_pattern": ({}, "rank_pattern {'v_proj': 8}"),
    "with_dora": ({"use_dora": True}, "of kind DoRA"),
    "with_embedding": ({"target_modules": [*TARGETS, "embed_tokens"]}, "LoRA on an embedding"),
}


@pytest.mark.parametrize("case", list(DECLARED_RANKS))
def test_ranks_a_rank_pattern_declares_are_unsupported_naming_it(trainer_run, case, tmp_path):
    root = trainer_run[0]
    settings, words = DECLARED_RANKS[case]
    base = tiny_causal_lm("qwen2")
    with warnings.catch_warnings():  # peft warns of the tied embedding it adapts
        warnings.simplefilter("ignore")
        run = _trainer_checkpoint(tmp_path, base, rank_pattern=RANK_PATTERN, **settings)
    code, verdict, json_verdict = _validate_verdict(run, "--hf-config", root / "base")
    assert code == 1 and verdict.startswith("UNSUPPORTED") and words in verdict, verdict
    assert json_verdict == "unsupported", verdict
    code, _, err = run_cli(
        "ckpt", "export-hf", run, "--out", tmp_path / "x", "--hf-config", root / "base"
    )
    assert code == 2 and words in one_error_line(err), err


@pytest.mark.parametrize("declared", [{}, {"v_proj": 16}])
def test_several_ranks_nothing_declares_are_invalid(trainer_run, tmp_path, declared):
    """The same tensors with rank_pattern gone from adapter_config.json, or declaring a rank
    no tensor has (an A of rank 8 is then declared by nothing): damage."""
    root = trainer_run[0]
    run = _trainer_checkpoint(tmp_path, tiny_causal_lm("qwen2"), rank_pattern=RANK_PATTERN)
    config = run / "checkpoint-5" / "adapter_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "rank_pattern": declared}))
    code, verdict, json_verdict = _validate_verdict(run, "--hf-config", root / "base")
    assert code == 1 and verdict.startswith("INVALID: "), verdict
    assert json_verdict == "invalid", verdict
    _, stdout, _ = run_cli("ckpt", "validate", run, "--hf-config", root / "base")
    assert "adapters of ranks [4, 8] in one checkpoint" in stdout, stdout
