"""What a user coming from torchtitan, HF or verl types by habit: a subcommand without its
group (`mfsdp export-hf`), an option given as a command (`mfsdp version`), a trainer mfsdp
does not have (`mfsdp train ppo`), and dtype spellings torch and HF use (`bfloat16`)."""

from __future__ import annotations

import sys

import pytest

from cli.main import main


def _run_main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """`mfsdp ARGS` through the console entry point (where usage errors are reported)."""
    monkeypatch.setattr(sys, "argv", ["mfsdp", *args])
    with pytest.raises(SystemExit) as done:
        main()
    captured = capsys.readouterr()
    return int(done.value.code or 0), captured.out, captured.err


@pytest.mark.parametrize(
    "args, meant",
    [
        (["export-hf", "runs/demo", "--out", "hf"], "mfsdp ckpt export-hf"),
        (["validate", "runs/demo"], "mfsdp ckpt validate"),
        (["sft", "--config", "x.yaml"], "mfsdp train sft"),
        (["gsm8k", "--input", "x"], "mfsdp data gsm8k"),
        (["train", "ckpt"], "mfsdp ckpt"),
        (["version"], "mfsdp --version"),
    ],
)
def test_a_command_given_at_the_wrong_level_names_the_full_command(
    monkeypatch, capsys, args, meant
):
    code, out, err = _run_main(monkeypatch, capsys, *args)
    assert code == 2 and out == ""
    assert err.endswith(f"(did you mean '{meant}'?)\n") and err.count("\n") == 1, err


def test_a_command_with_no_close_name_lists_the_commands_there(monkeypatch, capsys):
    code, _out, err = _run_main(monkeypatch, capsys, "train", "ppo")
    assert (code, err) == (
        2,
        "error: No such command 'ppo' for 'mfsdp train'; its commands: grpo, sft\n",
    )


def test_a_wrong_level_command_under_json_is_one_json_object(monkeypatch, capsys):
    import json

    code, out, _err = _run_main(monkeypatch, capsys, "inspect", "runs/demo", "--json")
    assert code == 2
    assert json.loads(out)["error"].endswith("(did you mean 'mfsdp ckpt inspect'?)")


# ------------------------------------------------------------------ dtype spellings


def _safetensors_dtypes(model_dir) -> set[str]:
    """The dtypes the header of every safetensors file in `model_dir` records."""
    import json as json_module
    import struct

    found = set()
    for path in model_dir.glob("*.safetensors"):
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json_module.loads(handle.read(length))
        found |= {entry["dtype"] for name, entry in header.items() if name != "__metadata__"}
    return found


@pytest.mark.parametrize(
    "spelt, stored",
    [("bfloat16", "BF16"), ("BF16", "BF16"), ("torch.float16", "F16"), ("half", "F16")],
)
def test_export_and_import_take_the_dtype_as_torch_and_hf_spell_it(tmp_path, spelt, stored):
    from click.testing import CliRunner

    from cli.main import app
    from tests.support.paths import FIXTURES
    from trainer.tiny import build_tiny_model_dir

    exported = tmp_path / "hf"
    done = CliRunner().invoke(
        app,
        [
            "ckpt",
            "export-hf",
            str(FIXTURES / "megatron_fsdp_qwen2" / "run"),
            "--out",
            str(exported),
            "--dtype",
            spelt,
        ],
    )
    assert done.exit_code == 0, done.output
    assert _safetensors_dtypes(exported) == {stored}
    source = build_tiny_model_dir(tmp_path / "model", with_weights=True)
    done = CliRunner().invoke(
        app, ["ckpt", "import-hf", str(source), "--out", str(tmp_path / "dcp"), "--dtype", spelt]
    )
    assert done.exit_code == 0, done.output


def test_a_dtype_no_spelling_reaches_is_refused_naming_the_choices(monkeypatch, capsys):
    code, _out, err = _run_main(
        monkeypatch, capsys, "ckpt", "export-hf", "x", "--out", "y", "--dtype", "fp8"
    )
    assert code == 2 and "'fp8' is not one of 'auto', 'bf16', 'fp16', 'fp32'" in err


@pytest.mark.parametrize(
    "command, key", [("sft", "strategy.mixed_precision"), ("grpo", "rollout.dtype")]
)
def test_a_dtype_config_key_takes_torch_spellings(command, key):
    from trainer.config import ConfigError, SFTConfig, load_config
    from trainer.grpo.config import GRPOConfig

    cls = SFTConfig if command == "sft" else GRPOConfig
    for spelt, meant in [("bfloat16", "bf16"), ("torch.float32", "fp32"), ("FP32", "fp32")]:
        section, name = key.split(".")
        assert getattr(getattr(load_config(cls, None, [f"{key}={spelt}"]), section), name) == meant
    with pytest.raises(ConfigError, match=rf"'{key}' expects one of auto \| bf16 \| fp32"):
        load_config(cls, None, [f"{key}=fp8"])


# ------------------------------------------------------------------ config keys from elsewhere


@pytest.mark.parametrize(
    "given, first",
    [
        ("optim.learning_rate", "optim.lr"),  # HF TrainingArguments, torchtitan
        ("learning_rate", "optim.lr"),
        ("optim.wd", "optim.weight_decay"),
        ("optim.lrr", "optim.lr"),  # a typo still finds the close name
    ],
)
def test_an_unknown_key_suggests_the_key_it_abbreviates_or_spells_out_first(given, first):
    from trainer.config import ConfigError, SFTConfig, load_config

    with pytest.raises(ConfigError) as err:
        load_config(SFTConfig, None, [f"{given}=1"])
    assert f"unknown config key '{given}'; did you mean {first}" in str(err.value)


def test_a_verl_key_mfsdp_does_not_map_is_named_whole_with_mfsdps_own(tmp_path):
    """Was: "unknown config key 'actor_rollout_ref'; did you mean actor.kl_loss_coef?"."""
    from trainer.config import ConfigError, load_config
    from trainer.grpo.config import GRPOConfig

    yaml_file = tmp_path / "verl.yaml"
    yaml_file.write_text("actor_rollout_ref:\n  rollout:\n    dtype: bfloat16\n")
    for source, overrides, config in [
        ("command-line override", ["actor_rollout_ref.rollout.dtype=bfloat16"], None),
        (str(yaml_file), [], yaml_file),
    ]:
        with pytest.raises(ConfigError) as err:
            load_config(GRPOConfig, config, overrides)
        assert str(err.value) == (
            f"{source}: verl key 'actor_rollout_ref.rollout.dtype' is not one mfsdp maps "
            "(docs/verl.md); did you mean rollout.dtype?"
        )
    with pytest.raises(ConfigError) as err:
        load_config(GRPOConfig, None, ["actor_rollout_ref.rollout.nothing=1"])
    assert str(err.value).endswith("; `mfsdp config defaults grpo` lists mfsdp's keys")
