"""`mfsdp config from-verl` keeps how many processes the verl run started: torchrun's options
before verl's SFT trainer (`--nproc-per-node=8`, `--nnodes 2`, ...), or a GRPO run's
trainer.n_gpus_per_node and trainer.nnodes, become `mfsdp train` flags on the command line
the YAML's first comment gives. Dropped, the header's command trained on one GPU of eight
(the global batch kept: eight times slower) at exit 0. A count known only when the script
runs is a placeholder `mfsdp train` refuses, said in a note, never guessed."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import app
from tests.support.paths import REPO
from trainer.verl_import import Conversion, convert_verl

SFT = "-m verl.trainer.sft_trainer data.train_files=/d/train.parquet model.path=/m"
GRPO = (
    "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
    " data.train_files=/d/train.parquet actor_rollout_ref.model.path=/m"
)


def convert(tmp_path: Path, text: str) -> Conversion:
    script = tmp_path / "run.sh"
    script.write_text(text)
    return convert_verl(script)


def command(conversion: Conversion) -> str:
    """The header's `mfsdp train` command, less the source it names."""
    return conversion.to_yaml("run.sh").splitlines()[0].removeprefix("# ").split("   (")[0]


def test_the_sft_example_script_trains_on_its_eight_processes():
    conversion = convert_verl(REPO / "examples/verl/run_sft_megatron_fsdp.sh")
    assert command(conversion) == "mfsdp train sft --config THIS_FILE --nproc-per-node 8"
    assert not conversion.incomplete


def test_the_grpo_example_script_trains_on_its_eight_gpus():
    conversion = convert_verl(REPO / "examples/verl/run_grpo_megatron_fsdp.sh")
    assert command(conversion) == "mfsdp train grpo --config THIS_FILE --nproc-per-node 8"


@pytest.mark.parametrize(
    "launcher",
    [
        "torchrun --nproc-per-node=8",
        "torchrun --nproc_per_node=8",
        "torchrun --nproc-per-node 8",
        "torchrun --nproc_per_node 8",
        "torchrun --nproc_per=8",  # a prefix argparse takes
        "torchrun --standalone --nnodes=1 --nproc-per-node=8",
        "torchrun --nnodes 1:1 --nproc_per_node=8 --max-restarts=2",
        "/usr/local/bin/torchrun -r3 --nproc_per_node=8",
        "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 torchrun --nproc_per_node=8",
        "python3 -u -m torch.distributed.run --nproc_per_node=8",
        "python -m torch.distributed.launch --use_env --nproc_per_node=8",
    ],
)
def test_torchrun_forms_give_the_process_count(tmp_path, launcher):
    conversion = convert(tmp_path, f"{launcher} {SFT}\n")
    assert command(conversion).endswith("--config THIS_FILE --nproc-per-node 8")
    assert not conversion.incomplete


@pytest.mark.parametrize(
    "lines",
    [
        "N=4\ntorchrun --nproc_per_node=$N",
        "N=4\ntorchrun --nproc_per_node ${N}",
        "torchrun --nproc_per_node=${NGPUS_UNSET_HERE:-4}",
        'ARGS="--nproc_per_node 4 --nnodes=1"\ntorchrun $ARGS',
        'ARGS=(--nproc_per_node 4)\ntorchrun "${ARGS[@]}"',
        "launch() {\n  torchrun --nproc_per_node=$1 " + SFT + "\n}\nlaunch 4\n#",
    ],
)
def test_values_from_the_scripts_variables(tmp_path, lines):
    conversion = convert(tmp_path, f"{lines} {SFT}\n")
    assert command(conversion).endswith("--config THIS_FILE --nproc-per-node 4")


def test_one_process_adds_nothing(tmp_path):
    conversion = convert(tmp_path, f"torchrun --standalone --nproc_per_node=1 {SFT}\n")
    assert command(conversion) == "mfsdp train sft --config THIS_FILE"
    assert not any("torchrun" in note for note in conversion.notes)


def test_several_machines_give_the_rendezvous(tmp_path):
    conversion = convert(
        tmp_path,
        "torchrun --nnodes=2 --node_rank=1 --nproc_per_node=8 --master_addr=node0"
        f" --master_port 29600 --rdzv_id=job7 --tee 3 {SFT}\n",
    )
    assert command(conversion).endswith(
        "--nproc-per-node 8 --nnodes 2 --rdzv-endpoint node0:29600 --node-rank 1 --rdzv-id job7"
    )
    assert "torchrun --tee 3: not passed on" in " ".join(conversion.notes)
    endpoint = convert(tmp_path, f"torchrun --nnodes 2 --rdzv-endpoint=n0:29400 {SFT}\n")
    assert command(endpoint).endswith("--nnodes 2 --rdzv-endpoint n0:29400")


@pytest.mark.parametrize(
    "launcher, given",
    [
        ("torchrun --nproc_per_node=$1", "torchrun --nproc_per_node=$1"),
        ("torchrun --nproc_per_node=${NGPUS_UNSET_HERE}", "--nproc_per_node=${NGPUS_UNSET_HERE}"),
        ("N=$(nvidia-smi -L | wc -l)\ntorchrun --nproc_per_node=$N", "--nproc_per_node="),
        ("torchrun --nproc-per-node=gpu", "torchrun --nproc-per-node=gpu"),
        ("torchrun $DIST_ARGS_UNSET_HERE", "$DIST_ARGS_UNSET_HERE"),
    ],
)
def test_a_count_known_only_when_the_script_runs_is_said_not_guessed(tmp_path, launcher, given):
    conversion = convert(tmp_path, f"{launcher} {SFT}\n")
    assert command(conversion).endswith("--config THIS_FILE --nproc-per-node N")
    assert any(
        note.startswith("--nproc-per-node N in the command above") and given in note
        for note in conversion.notes
    ), conversion.notes


def test_an_elastic_range_of_machines_is_said_not_guessed(tmp_path):
    conversion = convert(tmp_path, f"torchrun --nnodes=1:4 --rdzv-endpoint=n0:29400 {SFT}\n")
    assert command(conversion).endswith("--nnodes NODES --rdzv-endpoint n0:29400")
    assert any(
        note.startswith("--nnodes NODES in the command above: torchrun --nnodes=1:4 is a range")
        for note in conversion.notes
    ), conversion.notes


def test_grpo_takes_its_trainer_keys(tmp_path):
    conversion = convert(tmp_path, f"{GRPO} trainer.n_gpus_per_node=4 trainer.nnodes=2\n")
    # several machines meet at the Ray cluster's address, which the script does not hold
    assert command(conversion).endswith(
        "--config THIS_FILE --nproc-per-node 4 --nnodes 2 --rdzv-endpoint HOST:PORT"
    )
    assert any(
        note.startswith("--rdzv-endpoint HOST:PORT in the command above: where the machines")
        for note in conversion.notes
    ), conversion.notes
    one = convert(tmp_path, f"{GRPO} trainer.n_gpus_per_node=4 trainer.nnodes=1\n")
    assert command(one).endswith("--config THIS_FILE --nproc-per-node 4")
    unknown = convert(tmp_path, f"{GRPO} trainer.n_gpus_per_node=$NUM_GPUS_UNSET_HERE\n")
    assert command(unknown).endswith("--config THIS_FILE --nproc-per-node N")
    assert any(
        note.startswith("--nproc-per-node N in the command above: trainer.n_gpus_per_node=$NUM")
        for note in unknown.notes
    ), unknown.notes


@pytest.mark.parametrize("plus", ["+", "++"])
def test_grpo_keys_given_with_hydras_plus_are_read(tmp_path, plus):
    """`++trainer.n_gpus_per_node=8` is read as the key table reads it: it was left out of
    the command while the table said to pass the flags, and the last value given wins."""
    given = (
        f"{plus}trainer.n_gpus_per_node=2 {plus}trainer.n_gpus_per_node=8 {plus}trainer.nnodes=2"
    )
    conversion = convert(tmp_path, f"{GRPO} {given}\n")
    assert command(conversion).endswith(
        "--config THIS_FILE --nproc-per-node 8 --nnodes 2 --rdzv-endpoint HOST:PORT"
    )
    assert not any("pass --nproc-per-node" in note for note in conversion.notes), conversion.notes


def test_grpo_started_by_torchrun_without_trainer_keys(tmp_path):
    launch = GRPO.replace("python3 -m", "torchrun --nproc_per_node=2 -m")
    conversion = convert(tmp_path, launch + "\n")
    assert command(conversion).endswith("--config THIS_FILE --nproc-per-node 2")


def test_a_grpo_yaml_config_gives_its_gpus_too(tmp_path):
    config = tmp_path / "ppo.yaml"
    config.write_text(
        "algorithm: {adv_estimator: grpo}\n"
        "trainer: {n_gpus_per_node: 2, nnodes: 1}\n"
        "actor_rollout_ref: {model: {path: /m}}\n"
    )
    assert command(convert_verl(config)).endswith("--nproc-per-node 2")


def test_the_cli_writes_a_placeholder_mfsdp_train_refuses(tmp_path):
    """The config is whole without the count (exit 0); the header's command, copied as it
    is, fails at once instead of training on one process."""
    script = tmp_path / "run.sh"
    script.write_text(f"torchrun --nproc_per_node=$1 {SFT}\n")
    result = CliRunner().invoke(app, ["config", "from-verl", str(script)])
    assert result.exit_code == 0, result.output
    header = result.stdout.splitlines()[0]
    assert header.startswith("# mfsdp train sft --config THIS_FILE --nproc-per-node N ")
    config = tmp_path / "sft.yaml"
    config.write_text(result.stdout)
    copied = header.removeprefix("# mfsdp ").split("   (")[0].replace("THIS_FILE", str(config))
    refused = CliRunner().invoke(app, copied.split())
    assert refused.exit_code == 2 and "'N' is not a valid integer" in refused.stderr, refused.output
