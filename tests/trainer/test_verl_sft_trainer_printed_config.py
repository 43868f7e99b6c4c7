"""The config verl's SFT trainer prints (`python -m verl.trainer.sft_trainer --cfg job`:
sft_trainer_engine.yaml with its model, engine, optim and profiler files) carries over key by
key to `mfsdp train sft`. Its `profiler:` section was an unknown key ("did you mean
trainer.profile_interval"), its `model.*` of verl's hf_model.yaml and `engine.*` of its FSDP
engine were "no such key here" (the same keys under GRPO's actor were read), and the data
keys verl's MultiTurnSFTDataset reads (`data.seed`, `image_key`, `video_key`) were refused as
GRPO's, or unknown (`enable_thinking_default`, `num_workers`). Each is read here as the
actor's same setting is: the profiler accepted only off, a key that changes nothing ignored
with a note, one asking for what mfsdp does not do refused with the reason."""

from __future__ import annotations

import logging

import pytest
import yaml

from tests.support.interop_layouts import run_cli
from tests.support.paths import REPO
from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl

FIXTURES = REPO / "tests" / "fixtures" / "verl_configs"
PRINTED = {
    "b178a3cd": FIXTURES / "sft_trainer_engine.printed.yaml",
    "1dda039": FIXTURES / "sft_trainer_engine.printed.1dda039.yaml",
}
PROFILER = """\
profiler:
  tool: torch
  enable: false
  all_ranks: false
  ranks: []
  save_path: outputs/profile
"""


def refused(override: str, why: str) -> str:
    return f"command-line override: verl key '{override}' has no equivalent here: {why}"


@pytest.mark.parametrize("commit", PRINTED)
def test_verls_printed_sft_config_converts_with_no_key_listed(commit, tmp_path):
    conversion = convert_verl(PRINTED[commit], "sft")
    assert (conversion.dropped, conversion.incomplete) == ([], [])
    written = tmp_path / "sft.yaml"
    written.write_text(conversion.to_yaml(str(PRINTED[commit])))
    cfg = load_config(SFTConfig, written)
    assert (cfg.data.global_batch_size, cfg.data.max_tokens_per_micro_batch) == (256, 8192)
    assert (cfg.optim.lr, cfg.trainer.epochs, cfg.model.activation_checkpointing) == (1e-3, 4, True)
    notes = "\n".join(conversion.notes)
    assert "verl's profiler.tool_config.torch.contents is ignored: the profiler's" in notes
    assert "verl's engine.use_torch_compile is ignored: speed or memory only" in notes
    assert "verl's model.tiled_mlp.enabled is ignored: speed or memory only" in notes


@pytest.mark.parametrize("commit", PRINTED)
def test_train_sft_reads_the_printed_config_as_the_conversion_does(commit, tmp_path):
    """Its `data.val_files: null` included: verl's "not set", mfsdp's [] either way."""
    printed = yaml.safe_load(PRINTED[commit].read_text())
    printed["data"].update(train_files="/d/train.parquet")
    path = tmp_path / "printed.yaml"
    path.write_text(yaml.safe_dump(printed, sort_keys=False))
    conversion = convert_verl(path, "sft")
    assert conversion.dropped == []
    written = tmp_path / "sft.yaml"
    written.write_text(conversion.to_yaml(str(path)))
    assert load_config(SFTConfig, path) == load_config(SFTConfig, written)


def test_a_profiler_section_off_in_an_mfsdp_config_loads(tmp_path, caplog):
    """`mfsdp config defaults sft` with verl's `profiler:` appended, as the issue ran it."""
    code, out, err = run_cli("config", "defaults", "sft")
    assert code == 0, err
    path = tmp_path / "base.yaml"
    path.write_text(out + PROFILER)
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        cfg = load_config(SFTConfig, path, ["data.train_files=[/d/t.parquet]"])
    assert cfg.data.train_files == ["/d/t.parquet"]
    assert "verl's profiler.enable is ignored: profiling is not supported" in caplog.text
    assert (
        "verl's profiler.save_path is ignored: the profiler's settings, which verl reads only"
        " with profiler.enable or trainer.profile_interval on"
    ) in caplog.text


@pytest.mark.parametrize("value", ["true", "True"])
def test_the_profiler_on_is_refused(value):
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, None, [f"profiler.enable={value}"])
    assert str(err.value) == refused(f"profiler.enable={value}", "profiling is not supported")


@pytest.mark.parametrize(
    "override", ["profiler.enable=false", "profiler.tool=nsys", "profiler.ranks=[0]"]
)
def test_the_profiler_section_is_sfts_alone(override):
    load_config(SFTConfig, None, [override])
    key = override.partition("=")[0]
    with pytest.raises(ConfigError) as err:
        load_config(GRPOConfig, None, [override])
    assert (
        str(err.value)
        == f"command-line override: verl key '{key}' is for mfsdp train sft, not grpo"
    )


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("+data.seed=1", "verl's data.seed is ignored: the shuffle here is seeded by trainer.seed"),
        ("data.seed=7", "seeds with it only its pick of data.train_max_samples rows"),
        ("data.image_key=images", "the models trained here are text models"),
        ("+data.video_key=videos", "the models trained here are text models"),
        ("data.image_patch_size=14", "the models trained here are text models"),
        ("data.num_workers=8", "verl's data.num_workers is ignored: speed or memory only"),
        ("data.enable_thinking_default=none", "enable_thinking is not given to the chat template"),
        ("data.enable_thinking_default=null", "null, verl's 'not set'"),
        ("trainer.balance_batch=true", "reorders a step's sequences across ranks"),
    ],
)
def test_keys_verls_sft_dataset_reads_are_ignored_with_a_note(override, said, caplog):
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        cfg = load_config(SFTConfig, None, [override])
    assert said in caplog.text
    assert cfg.trainer.seed == SFTConfig().trainer.seed  # nothing else set
    assert cfg.data == SFTConfig().data


@pytest.mark.parametrize("value", ["true", "false"])
def test_a_default_enable_thinking_is_refused_as_a_rows_is(value):
    """A row's `enable_thinking` column is refused (trainer/data/chat.py), and
    `data.enable_thinking_key` accepted only at its default name: the template here is
    never given enable_thinking, so a default for it would not be either."""
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, None, [f"data.enable_thinking_default={value}"])
    assert str(err.value) == refused(
        f"data.enable_thinking_default={value}",
        "enable_thinking is not given to the chat template here: each row is rendered at the"
        " template's own default",
    )


@pytest.mark.parametrize("override", ["data.num_workers=8", "data.enable_thinking_default=none"])
def test_sft_only_data_keys_are_sfts_in_grpo(override):
    key = override.partition("=")[0]
    with pytest.raises(ConfigError) as err:
        load_config(GRPOConfig, None, [override])
    assert (
        str(err.value)
        == f"command-line override: verl key '{key}' is for mfsdp train sft, not grpo"
    )


@pytest.mark.parametrize(
    "override", ["data.seed=1", "data.image_key=images", "trainer.balance_batch=false"]
)
def test_keys_both_trainers_read_stay_ignored_in_grpo(override):
    load_config(GRPOConfig, None, [override])


@pytest.mark.parametrize(
    ("override", "shown", "why"),
    [
        ("model.enable_activation_offload=true", "true", "activation offload is not supported"),
        ("model.mtp.enable=true", "true", "multi-token prediction is not supported"),
        ("model.custom_chat_template=x", "x", "the chat template here is the tokenizer's"),
        ("model.override_config={model_config:{num_hidden_layers:2}}", None, "overriding"),
        ("engine.param_offload=true", "true", "CPU offload is not supported yet"),
        ("engine.offload_policy=true", "true", "CPU offload is not supported yet"),
        ("engine.fsdp_size=2", "2", "no hybrid sharding groups"),
        ("engine.model_dtype=bf16", "bf16", "main weights are fp32 here"),
        ("engine.full_determinism=true", "true", "deterministic kernels are not forced"),
        ("engine.wrap_policy.min_num_params=1000", "1000", "the sharded units here are decoder"),
    ],
)
def test_sfts_model_and_engine_keys_are_refused_as_the_actors_are(override, shown, why):
    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, None, [override])
    key = override.partition("=")[0]
    assert str(err.value).startswith(f"command-line override: verl key '{key}=")
    assert why in str(err.value)
    if shown is not None:
        assert f"'{key}={shown}'" in str(err.value)


def test_sfts_tokenizer_path_is_model_tokenizer(caplog):
    with caplog.at_level(logging.WARNING, logger="mfsdp.config"):
        cfg = load_config(SFTConfig, None, ["model.tokenizer_path=/t", "model.use_liger=true"])
    assert (cfg.model.tokenizer, cfg.model.liger) == ("/t", True)
    assert "verl's model.tokenizer_path is model.tokenizer=/t here" in caplog.text
