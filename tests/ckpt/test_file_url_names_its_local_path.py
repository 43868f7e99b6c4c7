"""A `file://` URL given where a local checkpoint or model path is read names the local
path to give instead; the advice for other URLs (copy it with gcloud or aws) was given
for it too, and training's model keys said only that the path did not exist. Every spelling
of such a URL is one: `file:/abs/x` and `FILE:///abs/x` were read as missing local paths,
`file://localhost/abs/x` was told to give the relative `localhost/abs/x`, and `sp%20ace`
was kept in a path whose dir is `sp ace`."""

import shutil
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
    assert code == 2 and line.endswith(f"give the local path itself, {local}"), line
    assert "gcloud" not in line and "aws" not in line


@pytest.mark.parametrize("command", ["validate", "inspect"])
@pytest.mark.parametrize(
    "spelt", ["file:{path}", "FILE://{path}", "file://localhost{path}", "file://{quoted}"]
)
def test_every_spelling_of_a_file_url_names_a_local_path_that_validates(spelt, command, tmp_path):
    """inspect said "not a URL of the form file:///abs/path" for file:/x and FILE:///x."""
    local = tmp_path / "sp ace" / "run"
    shutil.copytree(RUN, local)
    url = spelt.format(path=local, quoted=str(local).replace(" ", "%20"))
    code, _out, err = run_cli("ckpt", command, url)
    line = one_error_line(err)
    assert code == 2 and line.endswith(f"give the local path itself, {local}"), line
    advised = line.rsplit("give the local path itself, ", 1)[1]
    code, out, err = run_cli("ckpt", command, advised)
    assert code == 0, out + err


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
    assert str(raised.value).endswith(f"give the local path itself, {local}")
