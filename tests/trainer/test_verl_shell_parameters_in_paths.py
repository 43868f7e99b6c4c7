"""A shell parameter in a path is refused, whatever its form: verl's SFT examples set
`save_path=$2` and pass `trainer.default_local_dir=$save_path`; `mfsdp config from-verl`
wrote `run_dir: $2` at exit 0, and `mfsdp train sft` trained into a folder named `$2`, since
only `${...}` and `$NAME` were refused. Now the conversion exits 1 naming the key, and
training refuses the path (exit 2, naming the key) before anything is written."""

from __future__ import annotations

import pytest
import yaml

from tests.support.fresh_python import mfsdp
from trainer.config import ConfigError, SFTConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.local_paths import check_no_variables
from trainer.verl_import import convert_verl

PARAMETERS = [
    "$0",
    "$1",
    "$9",
    "${10}",
    "$@",
    "$*",
    "$#",
    "$?",
    "$$",
    "$!",
    "$-",
    "$(date +%s)",
    "`date`",
]

# verl's examples/sft/gsm8k/run_qwen_05_peft.sh, shortened
PEFT_SCRIPT = """\
nproc_per_node=$1
save_path=$2
shift 2
torchrun --standalone --nnodes=1 --nproc_per_node=$nproc_per_node \\
     -m verl.trainer.fsdp_sft_trainer \\
    data.prompt_key=extra_info \\
    optim.lr=1e-4 \\
    model.partial_pretrain=Qwen/Qwen2.5-0.5B-Instruct \\
    trainer.default_local_dir=$save_path \\
    trainer.total_epochs=1 $@ \\
    model.lora_rank=32
"""


@pytest.mark.parametrize("cls", [SFTConfig, GRPOConfig])
@pytest.mark.parametrize("parameter", PARAMETERS)
def test_every_shell_parameter_in_a_path_key_is_refused_naming_it(cls, parameter, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"trainer": {"run_dir": f"runs/{parameter}/x"}}))
    with pytest.raises(ConfigError) as caught:
        check_no_variables(load_config(cls, config))
    message = str(caught.value)
    assert message.startswith(f"trainer.run_dir: runs/{parameter}/x holds {parameter}, which")
    assert "\n" not in message


@pytest.mark.parametrize("path", ["runs/cost$", "runs/a$ b", "runs/plain"])
def test_a_dollar_the_shell_leaves_alone_is_a_path(path, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"trainer": {"run_dir": path}}))
    check_no_variables(load_config(SFTConfig, config))


def test_from_verl_names_a_value_left_to_edit_and_fails(tmp_path):
    script = tmp_path / "run_qwen_05_peft.sh"
    script.write_text(PEFT_SCRIPT)
    conversion = convert_verl(script)
    assert conversion.tree["trainer"]["run_dir"] == "$2" and not conversion.dropped
    assert conversion.incomplete == ["trainer.run_dir=$2"]
    done = mfsdp("config", "from-verl", str(script))
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: from-verl: still to edit or add: trainer.run_dir=$2 (listed at the top)"
    ]
    assert "# trainer.run_dir=$2: an argument the script is run with: edit the value" in (
        done.stdout
    )


def test_training_from_such_a_conversion_stops_before_writing(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(PEFT_SCRIPT)
    config = tmp_path / "sft.yaml"
    config.write_text(convert_verl(script).to_yaml(str(script)))
    done = mfsdp("train", "sft", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: trainer.run_dir: $2 holds $2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.sh", "sft.yaml"]
