"""Unreadable checkpoint dirs, non-finite weights, shard indexes that disagree with their
shards and YAML keys given twice, each refused in one line with the right exit code:

* a checkpoint dir (run, step or dist_ckpt) this user may not read: a permission error
  naming it (exit 1), not "not a checkpoint" or click's "not readable" (exit 2);
* a Hugging Face model whose weights hold NaN/Inf (or overflow a --dtype cast): import-hf
  refuses it naming the tensor (exit 1), as export-hf and `validate --deep` do, and leaves
  nothing at --out; `--allow-nonfinite` imports it anyway;
* a sharded model whose model.safetensors.index.json disagrees with the shards (a tensor
  listed in the wrong shard, one not listed, one listed that no shard holds): transformers
  would load a different model than import-hf wrote (an unlisted weight is left randomly
  initialised), so import refuses it naming the index and the tensor (exit 1);
* a YAML config (file or override) giving one key twice: PyYAML kept the last silently, so
  a second `optim:` section dropped every key of the first; refused naming key and line
  (exit 2), while `<<` merges may still be overridden.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from tests.reliability.hf_model import hf_model
from tests.support.cli_errors import one_error
from tests.support.interop_layouts import run_cli
from tests.support.model_dirs import shard_in_two
from tests.support.paths import FIXTURES, REPO
from tests.support.permissions import run_cli_denied

MCORE_QWEN2 = FIXTURES / "mcore" / "qwen2"
MFSDP_RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"  # mfsdp's layout, with a manifest
STEP = "global_step_2"


# --------------------------------------------------------------------------- permissions
@pytest.mark.parametrize("denied", ["run", STEP, f"{STEP}/dist_ckpt"])
def test_a_checkpoint_dir_this_user_cannot_read_is_a_failed_read_naming_it(tmp_path, denied):
    run = tmp_path / "run"
    shutil.copytree(MFSDP_RUN, run)
    target = run / denied if denied != "run" else run
    given = [run, run / STEP, run / STEP / "dist_ckpt"]
    cases = [
        [*command, str(path)]
        for path in given
        for command in (
            ["ckpt", "validate"],
            ["ckpt", "validate", "--json"],
            ["ckpt", "inspect"],
            ["ckpt", "export-hf", "--out", str(tmp_path / "out")],
        )
    ]
    records = run_cli_denied(cases, unreadable=target)
    for args, record in zip(cases, records, strict=True):
        assert record["escaped"] is None, (args, record)
        assert record["exit"] == 1, (args, record)
        one_error(record["stderr"], str(target), "Permission denied")
        if "--json" in args:
            assert json.loads(record["stdout"])["exit_code"] == 1, (args, record)
    assert not (tmp_path / "out").exists()


def test_a_huggingface_dir_this_user_cannot_read_fails_the_export(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(MFSDP_RUN, run)
    assets = run / STEP / "huggingface"
    (record,) = run_cli_denied(
        [["ckpt", "export-hf", str(run), "--out", str(tmp_path / "o")]], unreadable=assets
    )
    assert record["exit"] == 1, record
    one_error(record["stderr"], str(assets), "Permission denied")


# --------------------------------------------------------------------------- import NaN/Inf
NONFINITE_AT = "model.layers.1.self_attn.q_proj.weight"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("value", [float("nan"), float("-inf")])
@pytest.mark.parametrize(
    "options", [("--layout", "mcore"), ("--layout", "hf"), ("--layout", "hf", "--dtype", "fp32")]
)
def test_import_refuses_weights_holding_nan_or_inf(tmp_path, dtype, value, options):
    def poison(tensors):
        tensors[NONFINITE_AT].view(-1)[5] = value

    model = hf_model(tmp_path, dtype, poison)
    out = tmp_path / "out"
    code, _out, err = run_cli("ckpt", "import-hf", model, "--out", out, *options)
    assert code == 1, err
    one_error(err, str(model / "model.safetensors"), NONFINITE_AT, "1 NaN/Inf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # nothing at or beside OUT
    code, _out, err = run_cli(
        "ckpt", "import-hf", model, "--out", out, *options, "--allow-nonfinite"
    )
    assert code == 0, err


def test_import_refuses_a_cast_that_overflows(tmp_path):
    def huge(tensors):
        tensors["model.norm.weight"][0] = 1e30

    model = hf_model(tmp_path, torch.float32, huge)
    code, _out, err = run_cli(
        "ckpt", "import-hf", model, "--out", tmp_path / "out", "--dtype", "fp16"
    )
    assert code == 1, err
    one_error(err, "model.norm.weight", "overflows float16")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- sharded index
def _wrong_shard(weight_map, second):
    weight_map[second[0]] = "model-00001-of-00002.safetensors"
    return second[0], "lists it in model-00001-of-00002.safetensors"


def _unlisted(weight_map, second):
    del weight_map[second[0]]
    return second[0], "does not list it"


def _phantom(weight_map, second):
    weight_map["model.layers.0.mlp.extra.weight"] = "model-00002-of-00002.safetensors"
    return "model.layers.0.mlp.extra.weight", "does not hold it"


@pytest.mark.parametrize("damage", [_wrong_shard, _unlisted, _phantom])
def test_an_index_that_disagrees_with_its_shards_is_refused(tmp_path, damage):
    model = hf_model(tmp_path)
    weight_map, second = shard_in_two(model)
    index = model / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    code, _out, err = run_cli("ckpt", "import-hf", model, "--out", tmp_path / "ok")
    assert code == 0, err  # the undamaged split imports
    name, words = damage(weight_map, second)
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    code, _out, err = run_cli("ckpt", "import-hf", model, "--out", tmp_path / "out")
    assert code == 1, err
    one_error(err, str(index), name, words)
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- YAML keys twice
def test_a_config_key_given_twice_is_refused_naming_it(tmp_path):
    from trainer.config import ConfigError, SFTConfig, load_config

    base = (REPO / "examples" / "sft_tiny_cpu.yaml").read_text()
    cases = {
        "section": (base + "optim:\n  lr: 1.0\n", "key 'optim' given twice"),
        "key": (base.replace("  lr: 3.0e-3\n", "  lr: 3.0e-3\n  lr: 1.0\n"), "key 'lr'"),
    }
    for name, (text, words) in cases.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=words) as caught:
            load_config(SFTConfig, path)
        assert str(path) in str(caught.value) and "(line " in str(caught.value)
    with pytest.raises(ConfigError, match="key 'lr' given twice"):
        load_config(SFTConfig, None, ["optim={lr: 1, lr: 2}"])
    merged = tmp_path / "merged.yaml"
    merged.write_text("optim:\n  <<: {lr: 1.0, clip_grad: 2.0}\n  lr: 0.5\n")
    config = load_config(SFTConfig, merged)
    assert (config.optim.lr, config.optim.clip_grad) == (0.5, 2.0)
