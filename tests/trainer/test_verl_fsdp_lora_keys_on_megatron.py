"""verl's FSDP-style LoRA keys (`actor_rollout_ref.model.lora_rank`, lora_alpha,
target_modules, lora_adapter_path) on its Megatron backend, which never reads them: it
builds its adapter from model.lora.* alone (verl/workers/config/megatron_peft.py). Carried
over, `lora_rank=16` trained a LoRA adapter verl does not build, while a note said LoRA was
off. They are ignored at verl's defaults and refused at any other value; the FSDP backend
reads them as before. The Megatron LoRA rules read the whole run, file and command line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainer.config import ConfigError, load_config
from trainer.grpo.config import GRPOConfig
from trainer.verl_import import convert_verl

MODEL = "actor_rollout_ref.model."
NOT_READ = "verl's Megatron backend does not read it"
GIVEN = [("lora_rank", 16), ("lora_alpha", 64), ("target_modules", ["q_proj"])]


def _script(tmp_path: Path, config_name: str, *keys: str) -> Path:
    script = tmp_path / "run.sh"
    script.write_text(
        f"python3 -m verl.trainer.main_ppo --config-name={config_name}"
        f" algorithm.adv_estimator=grpo {' '.join(repr(key) for key in keys)}\n"
    )
    return script


def _yaml(tmp_path: Path, model: dict, strategy: str = "megatron") -> Path:
    path = tmp_path / "run.yaml"
    verl = {"actor": {"strategy": strategy}, **({"model": model} if model else {})}
    tree = {"algorithm": {"adv_estimator": "grpo"}, "actor_rollout_ref": verl}
    path.write_text(yaml.safe_dump(tree))
    return path


def test_lora_rank_on_megatron_is_not_carried_and_trains_no_adapter(tmp_path):
    script = _script(
        tmp_path, "ppo_megatron_trainer", f"{MODEL}lora_rank=16", f"{MODEL}lora.alpha=64"
    )
    conversion = convert_verl(script)
    assert [item for item in conversion.dropped if item.startswith(f"{MODEL}lora_rank=16: ")]
    assert NOT_READ in " ".join(conversion.dropped)
    assert conversion.tree.get("model", {}).get("lora_rank", 0) == 0


@pytest.mark.parametrize("name, value", GIVEN)
def test_each_fsdp_lora_key_on_megatron_is_refused_in_a_yaml(tmp_path, name, value):
    with pytest.raises(ConfigError, match=NOT_READ) as refused:
        load_config(GRPOConfig, _yaml(tmp_path, {name: value}))
    assert f"{MODEL}{name}=" in str(refused.value)


@pytest.mark.parametrize("name, value", GIVEN)
def test_on_the_command_line_they_read_the_files_backend(tmp_path, name, value):
    with pytest.raises(ConfigError, match=NOT_READ):
        load_config(GRPOConfig, _yaml(tmp_path, {}), [f"{MODEL}{name}={value}"])


def test_at_verls_defaults_they_pass_with_a_note(tmp_path, caplog):
    defaults = {"lora_rank": 0, "lora_alpha": 16, "target_modules": "all-linear"}
    with caplog.at_level("WARNING", logger="mfsdp.config"):
        cfg = load_config(GRPOConfig, _yaml(tmp_path, defaults))
    assert cfg.model.lora_rank == 0
    assert caplog.text.count(NOT_READ) == len(defaults)


@pytest.mark.parametrize("name, value", GIVEN)
def test_the_fsdp_backend_still_carries_them(tmp_path, name, value):
    cfg = load_config(GRPOConfig, _yaml(tmp_path, {name: value}, strategy="fsdp"))
    assert getattr(cfg.model, name) == value


def test_megatron_lora_alpha_on_the_command_line_reads_the_files_rank(tmp_path):
    path = _yaml(tmp_path, {"lora": {"rank": 16}})
    cfg = load_config(GRPOConfig, path, [f"{MODEL}lora.alpha=64"])
    assert (cfg.model.lora_rank, cfg.model.lora_alpha) == (16, 64)


def test_the_files_other_failing_keys_are_told_with_the_command_line(tmp_path):
    """The file's keys fail only beside a command-line key that puts the run on Megatron:
    `mfsdp config from-verl FILE` reads the file alone and lists nothing failing, so the
    message does not send the user there."""
    path = tmp_path / "fsdp_lora.yaml"
    path.write_text(
        yaml.safe_dump(
            {"actor_rollout_ref": {"model": {"lora_rank": 8, "lora_alpha": 32}}},
        )
    )
    with pytest.raises(ConfigError) as caught:
        load_config(GRPOConfig, path, ["actor_rollout_ref.actor.strategy=megatron"])
    message = str(caught.value)
    assert "1 more key(s) of the file do not carry over either" in message
    assert "with this command line's keys beside them" in message
    assert f"from-verl {path}`" not in message
