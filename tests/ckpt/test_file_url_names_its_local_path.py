"""A `file://` URL given where a local checkpoint or model path is read names the local
path to give instead; the advice for other URLs (copy it with gcloud or aws) was given
for it too, and training's model keys said only that the path did not exist."""

from pathlib import Path

import pytest

from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.paths import FIXTURES
from trainer.config import ConfigError, ModelConfig
from trainer.model_source import resolve_model_source

RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"


@pytest.mark.parametrize("command", ["validate", "inspect", "import-hf"])
@pytest.mark.parametrize("local", [RUN, RUN / "global_step_2" / "huggingface"])
def test_ckpt_commands_name_the_local_path_of_a_file_url(command: str, local: Path, tmp_path):
    out = ("--out", tmp_path / "out") if command == "import-hf" else ()
    code, _out, err = run_cli("ckpt", command, f"file://{local}", *out)
    line = one_error_line(err)
    assert code == 2 and f"give the local path itself, {local} " in line, line
    assert "gcloud" not in line and "aws" not in line


@pytest.mark.parametrize(
    "key, model",
    [
        ("model.path", {"path": f"file://{RUN}"}),
        ("model.hf_config", {"path": str(RUN), "hf_config": f"file://{RUN}/global_step_2"}),
    ],
)
def test_training_model_keys_name_the_local_path_of_a_file_url(key: str, model: dict):
    with pytest.raises(ConfigError) as raised:
        resolve_model_source(ModelConfig(**model))
    local = model[key.removeprefix("model.")].removeprefix("file://")
    assert str(raised.value).startswith(f"{key}: file://{local}: a file:// URL;")
    assert f"give the local path itself, {local} " in str(raised.value)
