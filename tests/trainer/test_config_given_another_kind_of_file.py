"""A `--config` that is no run config at all (a Hugging Face config.json, a checkpoint's
manifest, a data, weights, tokenizer or adapter file) says in one line what the file is
and the key that takes it, not "unknown config key 'architectures'" or a did-you-mean
that leads nowhere."""

from __future__ import annotations

import json
import os

import pytest

from mfsdp_ckpt.command_as_run import DEV_SCRIPT
from mfsdp_ckpt.format.layout import MANIFEST_FILE, TRACKER_FILE
from tests.support.fresh_python import mfsdp
from trainer.config import ConfigError, SFTConfig
from trainer.config_kind import refuse_other_kind
from trainer.grpo.config import GRPOConfig

START_SFT = "; start a run config with `mfsdp config defaults sft > sft.yaml`"
MANIFEST = {"format_version": 1, "files": {}, "step": 4, "base_model": "m"}


@pytest.fixture
def here(tmp_path, monkeypatch):
    """tmp_path as the working dir, with no `./dev` caller: paths and commands as typed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(DEV_SCRIPT, raising=False)
    return tmp_path


def refusal(path: str, cls: type = SFTConfig) -> str:
    with pytest.raises(ConfigError) as raised:
        refuse_other_kind(cls, path)
    return str(raised.value)


def write(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as file:
        file.write(text)
    return path


def test_a_hugging_face_config_names_its_dir_as_model_path(here):
    config = write("hf/config.json", json.dumps({"architectures": ["X"], "model_type": "q"}))
    assert refusal(config) == (
        "hf/config.json: a Hugging Face model config, not an mfsdp run config; give its dir"
        f" as model.path=hf{START_SFT}"
    )


def test_a_checkpoints_hugging_face_config_names_the_checkpoint(here):
    write(f"run/global_step_4/{MANIFEST_FILE}", json.dumps(MANIFEST))
    config = write("run/global_step_4/huggingface/config.json", '{"model_type": "q"}')
    assert refusal(config, GRPOConfig) == (
        f"{config}: a Hugging Face model config, not an mfsdp run config; it is the config"
        " of the checkpoint run/global_step_4: give model.path=run/global_step_4; start a"
        " run config with `mfsdp config defaults grpo > grpo.yaml`"
    )


def test_a_manifest_names_the_run_to_resume_and_the_step_to_start_from(here):
    write(f"run/{TRACKER_FILE}", "4")
    manifest = write(f"run/global_step_4/{MANIFEST_FILE}", json.dumps(MANIFEST))
    assert refusal(manifest) == (
        f"{manifest}: a checkpoint's manifest.json, not an mfsdp run config; resume its run"
        " with trainer.run_dir=run, or start a new run from its weights with"
        f" model.path=run/global_step_4{START_SFT}"
    )


@pytest.mark.parametrize(
    "name, what",
    [
        (
            "rows.jsonl",
            "a data file, not an mfsdp run config; give it as data.train_files=d/rows.jsonl",
        ),
        (
            "t.parquet",
            "a data file, not an mfsdp run config; give it as data.train_files=d/t.parquet",
        ),
        (
            "model.safetensors",
            "a weights file, not an mfsdp run config; give its dir as model.path=d",
        ),
        (
            "tokenizer_config.json",
            "a Hugging Face model dir's tokenizer_config.json, not an mfsdp run config; give"
            " the dir as model.path=d",
        ),
        (
            "adapter_config.json",
            "a PEFT adapter's config, not an mfsdp run config; give its dir as"
            " model.lora_adapter_path=d",
        ),
    ],
)
def test_a_file_named_as_another_kind_is_told_unread(here, name, what):
    path = write(f"d/{name}", "\x00" * 16)  # not text: the name alone decides
    assert refusal(path) == f"{path}: {what}{START_SFT}"


def test_a_json_list_of_rows_is_a_data_file(here):
    rows = write("rows.json", json.dumps([{"prompt": "a", "response": "b"}]))
    assert refusal(rows).startswith("rows.json: a data file (a list of rows)")


def test_a_run_config_and_a_missing_file_are_left_to_the_loader(here):
    write("sft.yaml", "model:\n  path: m\n")
    refuse_other_kind(SFTConfig, "sft.yaml")
    refuse_other_kind(SFTConfig, "gone.parquet")


def test_the_command_line_names_dev_for_a_dev_user(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["X"]}))
    done = mfsdp(
        "train",
        "sft",
        "--config",
        "config.json",
        cwd=tmp_path,
        env={**os.environ, DEV_SCRIPT: "./dev"},
    )
    assert (done.returncode, done.stderr) == (
        2,
        "error: config.json: a Hugging Face model config, not an mfsdp run config; give its"
        " dir as model.path=.; start a run config with `./dev mfsdp config defaults sft >"
        " sft.yaml`\n",
    )


def test_a_run_config_another_trainer_saved_in_its_checkpoint_names_it(here):
    write("mb/iter_0000010/.metadata", "")
    saved = write("mb/iter_0000010/run_config.yaml", "model:\n  num_layers: 2\n")
    assert refusal(saved) == (
        f"{saved}: a file of the checkpoint mb/iter_0000010, not an mfsdp run config; to"
        f" start from that checkpoint give model.path=mb/iter_0000010{START_SFT}"
    )


def test_the_config_a_run_saved_beside_its_steps_still_loads(here):
    write(f"run/{TRACKER_FILE}", "4")
    write(f"run/global_step_4/{MANIFEST_FILE}", json.dumps(MANIFEST))
    refuse_other_kind(SFTConfig, write("run/config.yaml", "model:\n  path: m\n"))


def test_a_config_below_a_dir_holding_an_unrelated_manifest_still_loads(here):
    """Was: any config under a dir holding a manifest.json (a project's, a dataset's) or a
    trainer_state.json, however far up, was "a file of the checkpoint ."."""
    write(MANIFEST_FILE, json.dumps({"name": "my project"}))
    write("trainer_state.json", "{}")
    refuse_other_kind(SFTConfig, write("configs/sft.yaml", "model:\n  path: m\n"))
