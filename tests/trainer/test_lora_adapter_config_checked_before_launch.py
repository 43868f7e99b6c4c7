"""adapter_config.json's fields (`model.lora_adapter_path`) are checked as plain JSON
(trainer/lora_adapter_config.py), in the launching process as in each rank, so `mfsdp config
check` and train refuse the same file with the same line (exit 2), in seconds.

Was: `r: "4"` or a rank_pattern rank of 2**40 passed `config check` (exit 0, 31 s) and were
refused by train only after the models' imports (exit 2, 48 s): the field checks ran only
where a rank read the dir, after torch and peft loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli_errors import one_error
from tests.support.fresh_python import mfsdp, modules_after
from tests.support.sft import write_chat_jsonl
from trainer.config import ConfigError, ModelConfig
from trainer.lora_adapter_config import check_adapter_config
from trainer.lora_adapter_dir import read_adapter_dir

CONFIG = "adapter_config.json"
PLAIN = {
    "peft_type": "LORA",
    "r": 2,
    "lora_alpha": 4,
    "target_modules": ["q_proj", "v_proj"],
    "task_type": "CAUSAL_LM",
}
# field edits, with what the refusal says of the key
BAD = [
    (dict(r="4"), "'r' is '4', not a positive integer"),
    (dict(r=True), "'r' is True, not a positive integer"),
    (dict(rank_pattern={"q_proj": 2**40}), "'rank_pattern' is {'q_proj': 1099511627776}"),
    (dict(lora_dropout=1), "lora_dropout is 1, not a dropout probability"),
    (dict(layers_pattern="a.*"), "layers_pattern: 'a.*' is not a module name"),
    (dict(task_type="SEQ_CLS"), "task_type is 'SEQ_CLS', not CAUSAL_LM"),
]


def _adapter(tmp_path: Path, **fields: object) -> Path:
    """An adapter dir of PLAIN's config with `fields`; its weights file is never read by
    the field checks, which refuse before it is."""
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / CONFIG).write_text(json.dumps({**PLAIN, **fields}))
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    return adapter


@pytest.mark.parametrize(("fields", "says"), BAD)
def test_the_launchers_check_refuses_what_the_rank_would(tmp_path, fields, says):
    adapter = _adapter(tmp_path, **fields)
    with pytest.raises(ConfigError) as launched:
        check_adapter_config(ModelConfig(lora_adapter_path=str(adapter)))
    with pytest.raises(ConfigError) as ranked:
        read_adapter_dir(adapter)
    assert str(launched.value) == str(ranked.value)
    assert str(launched.value).startswith(f"model.lora_adapter_path: {adapter / CONFIG}: ")
    assert says in str(launched.value)


def test_no_adapter_path_is_nothing_to_check(tmp_path):
    check_adapter_config(ModelConfig())  # no model.lora_adapter_path: returns, reads nothing


def test_the_check_loads_neither_torch_nor_peft(tmp_path):
    adapter = _adapter(tmp_path, r="4")
    body = (
        "from trainer.config import ConfigError, ModelConfig\n"
        "from trainer.lora_adapter_config import check_adapter_config\n"
        "try:\n"
        "    check_adapter_config(ModelConfig(lora_adapter_path=sys.argv[2]))\n"
        "except ConfigError as err:\n"
        "    print(err)\n"
        "else:\n"
        "    raise SystemExit('not refused')\n"
    )
    assert modules_after(body, str(adapter), roots=("torch", "peft", "transformers")) == []


def test_config_check_exits_2_naming_the_file_and_key(tmp_path):
    adapter = _adapter(tmp_path, r="4")
    done = mfsdp(
        *("config", "check", "sft", "--config", "examples/sft_tiny_cpu.yaml"),
        f"model.lora_adapter_path={adapter}",
        f"data.train_files={write_chat_jsonl(tmp_path / 'train.jsonl')}",
        f"trainer.run_dir={tmp_path / 'run'}",
    )
    assert done.returncode == 2, done.stderr
    one_error(done.stderr, f"{adapter / CONFIG}: 'r' is '4', not a positive integer")
