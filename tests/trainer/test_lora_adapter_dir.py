"""An adapter dir (`model.lora_adapter_path`) and a regex `target_modules` are read as data
(trainer/lora_adapter_dir.py, trainer/lora_targets.py): a malformed field or tensor is one
line naming model.lora_adapter_path, the file and the key or tensor (each was a traceback
in every rank, `r: -1` blamed on model.target_modules), and PEFT never receives a regex
(one that backtracks held the run at its start for ever)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from trainer.config import ConfigError, ModelConfig

TARGETS = ["q_proj", "v_proj"]
CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
BACKTRACKS = "(.|.)*X"  # exponential in re on any module name


def _build(cfg: ModelConfig) -> torch.nn.Module:
    from trainer.model import build_hf_config, build_model, load_tokenizer

    return build_model(cfg, build_hf_config(cfg, load_tokenizer(cfg)), torch.device("cpu"), 0)


@pytest.fixture(scope="module")
def adapter(tmp_path_factory) -> Path:
    """A PEFT adapter on the tiny shape's q_proj and v_proj, saved by peft itself."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from trainer.model import build_hf_config, load_tokenizer

    cfg = ModelConfig()
    base = AutoModelForCausalLM.from_config(build_hf_config(cfg, load_tokenizer(cfg)))
    config = LoraConfig(r=2, lora_alpha=4, target_modules=TARGETS, init_lora_weights=False)
    out = tmp_path_factory.mktemp("adapter") / "adapter"
    get_peft_model(base, config).save_pretrained(out)
    return out


def _edited(adapter: Path, tmp_path: Path, **fields) -> Path:
    copy = Path(shutil.copytree(adapter, tmp_path / "adapter"))
    config = json.loads((copy / CONFIG).read_text())
    (copy / CONFIG).write_text(json.dumps({**config, **fields}))
    return copy


def _refusal(adapter: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        _build(ModelConfig(lora_adapter_path=str(adapter)))
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        (dict(r="4"), "'r' is '4', not a positive integer"),
        (dict(r=-1), "'r' is -1, not a positive integer"),
        (dict(task_type="NOPE"), "task_type is 'NOPE', not CAUSAL_LM"),
        (dict(target_modules=5), "'target_modules' is 5, not a module name or a list of them"),
        (dict(target_modules=[]), "target_modules is [], not module names"),
        (dict(exclude_modules=7), "exclude_modules is 7, not null, [], module names or a regex"),
        (
            dict(lora_alpha=1e308),
            "lora_alpha: 1e+308 over the rank 2 scales the adapter by 5e+307, past the 10000",
        ),
        (dict(layers_to_transform="0"), "layers_to_transform is '0', not null, a layer index"),
        (
            dict(layers_to_transform=[0], layers_pattern=BACKTRACKS),
            f"layers_pattern: {BACKTRACKS!r} is not a module name or a list of them",
        ),
    ],
    ids=[
        "r-text",
        "r-negative",
        "task-type",
        "targets-int",
        "targets-empty",
        "exclude-int",
        "alpha-overflowing-scale",
        "layers-text",
        "layers-pattern-regex",
    ],
)
def test_a_malformed_adapter_config_is_one_line_naming_the_file_and_key(
    adapter, tmp_path, fields, says
):
    edited = _edited(adapter, tmp_path, **fields)
    assert _refusal(edited).startswith(f"model.lora_adapter_path: {edited / CONFIG}: {says}")


def test_an_option_plain_lora_lacks_is_refused_whichever_it_is(adapter, tmp_path):
    """Options PEFT adds (activated LoRA's invocation tokens here) change what the adapter
    computes: passed on to LoraConfig, the run trained another model than export merges."""
    edited = _edited(adapter, tmp_path, alora_invocation_tokens=[3, 4])
    assert _refusal(edited) == (
        f"model.lora_adapter_path ({edited}): LoRA option alora_invocation_tokens=[3, 4] is"
        " not supported"
    )


def _weights_edit(adapter: Path, tmp_path: Path, edit) -> tuple[Path, str]:
    copy = Path(shutil.copytree(adapter, tmp_path / "adapter"))
    tensors = load_file(str(copy / WEIGHTS))
    name = sorted(tensors)[0]
    edit(tensors, name)
    save_file(tensors, str(copy / WEIGHTS))
    return copy, name


def test_a_tensor_of_another_shape_is_named_before_any_is_loaded(adapter, tmp_path):
    def wider(tensors, name):
        tensors[name] = torch.zeros(tensors[name].shape[0] + 1, tensors[name].shape[1])

    edited, name = _weights_edit(adapter, tmp_path, wider)
    assert _refusal(edited).startswith(
        f"model.lora_adapter_path: {edited / WEIGHTS} [{name}]: shape [3, "
    )


def test_an_integer_tensor_is_named(adapter, tmp_path):
    def integers(tensors, name):
        tensors[name] = tensors[name].to(torch.int32)

    edited, name = _weights_edit(adapter, tmp_path, integers)
    assert _refusal(edited) == (
        f"model.lora_adapter_path: {edited / WEIGHTS} [{name}]: stored as int32, but it is a"
        " floating-point weight of the Hugging Face PEFT adapter"
    )


def test_a_tensor_plain_lora_has_no_place_for_is_refused(adapter, tmp_path):
    def magnitude(tensors, name):
        tensors[name.replace("lora_A.weight", "lora_magnitude_vector")] = torch.ones(3)

    edited, _ = _weights_edit(adapter, tmp_path, magnitude)
    assert "does not fit this model (1 unexpected, 0 missing" in _refusal(edited)


def test_a_cut_short_weights_file_is_named(adapter, tmp_path):
    copy = Path(shutil.copytree(adapter, tmp_path / "adapter"))
    os.truncate(copy / WEIGHTS, 100)
    assert _refusal(copy).startswith(f"model.lora_adapter_path: {copy / WEIGHTS}: header length")


@pytest.mark.parametrize("exclude", [None, []], ids=["null", "empty-list"])
def test_the_adapter_loads_as_saved(adapter, tmp_path, exclude):
    """`exclude_modules: []` is PEFT's "exclude nothing" (and verl's Megatron default), as
    null is: it was refused as no module names."""
    saved = adapter if exclude is None else _edited(adapter, tmp_path, exclude_modules=exclude)
    model = _build(ModelConfig(lora_adapter_path=str(saved)))
    params = dict(model.named_parameters())
    stored = load_file(str(saved / WEIGHTS))
    assert len([p for p in params if ".lora_" in p]) == len(stored)
    for name, tensor in stored.items():
        ours = name.removeprefix("base_model.model.").replace(".weight", ".default.weight")
        assert torch.equal(params[ours], tensor), name


# --------------------------------------------------------------------------- regex targets
@pytest.fixture
def peft_receives(monkeypatch) -> list:
    """The target_modules and exclude_modules each LoraConfig PEFT injects holds."""
    import peft

    seen: list = []
    inject = peft.inject_adapter_in_model

    def spy(config, model, *args, **kwargs):
        seen.append((config.target_modules, config.exclude_modules))
        return inject(config, model, *args, **kwargs)

    monkeypatch.setattr(peft, "inject_adapter_in_model", spy)
    return seen


def test_a_regex_reaches_peft_as_the_names_it_matches(peft_receives, adapter, tmp_path):
    regex = r"model\.layers\.0\.self_attn\.(q|v)_proj"
    _build(ModelConfig(lora_rank=2, target_modules=regex))
    edited = _edited(
        adapter, tmp_path, target_modules=r".*\.(q|v)_proj", exclude_modules=r".*mlp\.up_proj"
    )
    _build(ModelConfig(lora_adapter_path=str(edited)))
    layers = (0, 1)  # the tiny shape's
    received = [(sorted(names), exclude and sorted(exclude)) for names, exclude in peft_receives]
    assert received == [
        (["model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj"], None),
        (
            [f"model.layers.{i}.self_attn.{m}_proj" for i in layers for m in "qv"],
            [f"model.layers.{i}.mlp.up_proj" for i in layers],
        ),
    ]


@pytest.mark.parametrize("where", ["config", "adapter"])
def test_a_regex_that_backtracks_is_refused_in_bounded_time(
    peft_receives, adapter, tmp_path, monkeypatch, where
):
    monkeypatch.setattr("trainer.lora_targets.REGEX_SECONDS", 1.0)
    if where == "config":
        cfg, key = ModelConfig(lora_rank=2, target_modules=BACKTRACKS), "model.target_modules"
    else:
        edited = _edited(adapter, tmp_path, target_modules=BACKTRACKS)
        cfg = ModelConfig(lora_adapter_path=str(edited))
        key = f"model.lora_adapter_path: {edited / CONFIG}: target_modules"
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        _build(cfg)
    assert time.monotonic() - started < 20
    assert str(caught.value).startswith(f"{key}: the regex {BACKTRACKS!r} takes over 1 s")
    assert peft_receives == []


@pytest.mark.parametrize(
    ("regex", "says"),
    [
        ("nothing_here", "the regex 'nothing_here' matches no module of the model"),
        ("(q_proj", "'(q_proj' is not a regex (missing ), unterminated subpattern"),
        ("((a{1000}){1000}){1000}", "the regex '((a{1000}){1000}){1000}' matches no module"),
    ],
)
def test_a_regex_matching_nothing_or_no_regex_is_named(regex, says):
    with pytest.raises(ConfigError) as caught:
        _build(ModelConfig(lora_rank=2, target_modules=regex))
    assert str(caught.value).startswith(f"model.target_modules: {says}")
