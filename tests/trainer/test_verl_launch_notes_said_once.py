"""The notes under `mfsdp config from-verl`'s header command say each launch flag once. A
placeholder (`--nproc-per-node N` from torchrun's `--nproc_per_node=$1`) was said twice,
in the note naming torchrun's options and in its own; a GRPO run's
trainer.n_gpus_per_node, carried into the command, still got the key table's note "is
ignored: ... pass --nproc-per-node / --nnodes to mfsdp train"; and a known
`--master_port` was dropped from the endpoint placeholder when `--master_addr` was known
only when the script ran."""

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
PASS_FLAGS = "pass --nproc-per-node / --nnodes to mfsdp train"


def convert(tmp_path: Path, text: str, name: str = "run.sh") -> Conversion:
    source = tmp_path / name
    source.write_text(text)
    return convert_verl(source)


def header(conversion: Conversion) -> list[str]:
    """The header's `mfsdp train` command (less the source it names) and the notes."""
    lines = [line.removeprefix("# ") for line in conversion.to_yaml("run.sh").splitlines()]
    return [lines[0].split("   (")[0], *conversion.notes]


def flag_pairs(command: str) -> list[str]:
    """`--flag value` of the command's launch flags."""
    words = command.split()[command.split().index("THIS_FILE") + 1 :]
    return [f"{flag} {value}" for flag, value in zip(words[::2], words[1::2], strict=True)]


def said(notes: list[str], pair: str) -> int:
    """How many notes name `--flag value` as in the command above."""
    return sum(f"{pair} " in f"{note} " and "in the command above" in note for note in notes)


@pytest.mark.parametrize(
    "script",
    [
        "nproc_per_node=$1\ntorchrun --standalone --nnodes=1 --nproc_per_node=$nproc_per_node"
        f" {SFT}",
        f"torchrun --nproc_per_node=$1 --nnodes=$2 {SFT}",
        f"torchrun --nnodes=2 --nproc_per_node=$1 --master_addr=$A --master_port=$P {SFT}",
        f"torchrun --nnodes=2 --nproc_per_node=8 --master_addr=$A --master_port=29500 {SFT}",
        f"torchrun --nnodes=2 --nproc_per_node=8 --master_addr=n0 --node_rank=1 {SFT}",
        f"torchrun --nproc-per-node=gpu {SFT}",
        f"{GRPO} trainer.n_gpus_per_node=$NGPUS_UNSET_HERE trainer.nnodes=1",
        f"{GRPO} trainer.n_gpus_per_node=$NGPUS_UNSET_HERE trainer.nnodes=2",
        f"{GRPO} trainer.n_gpus_per_node=8 trainer.nnodes=2",
    ],
)
def test_each_flag_of_the_command_is_said_once(tmp_path, script):
    command, *notes = header(convert(tmp_path, script + "\n"))
    pairs = flag_pairs(command)
    assert pairs, command
    for pair in pairs:
        assert said(notes, pair) == 1, (pair, notes)


def test_the_sft_fixture_with_its_count_from_the_first_argument(tmp_path):
    conversion = convert_verl(REPO / "tests/fixtures/verl_scripts/run_qwen_05_sp2.sh")
    command, *notes = header(conversion)
    assert command.endswith("--config THIS_FILE --nproc-per-node N")
    placeholder = [note for note in notes if "--nproc-per-node N" in note]
    assert placeholder == [
        "--nproc-per-node N in the command above: torchrun --nproc_per_node=$1 is known only"
        " when the script runs: write the value"
    ]


@pytest.mark.parametrize(
    "keys",
    [
        "trainer.n_gpus_per_node=2 trainer.nnodes=1",
        "trainer.n_gpus_per_node=8 trainer.nnodes=2",
        "trainer.n_gpus_per_node=$NGPUS_UNSET_HERE trainer.nnodes=$NNODES_UNSET_HERE",
        "trainer.n_gpus_per_node=1 trainer.nnodes=1",
        "trainer.nnodes=1",
    ],
)
def test_grpo_trainer_keys_in_the_command_get_no_note_to_pass_them(tmp_path, keys):
    notes = convert(tmp_path, f"{GRPO} {keys}\n").notes
    assert not [note for note in notes if PASS_FLAGS in note], notes


def test_grpo_trainer_keys_name_the_flags_they_give(tmp_path):
    command, *notes = header(
        convert(tmp_path, f"{GRPO} trainer.n_gpus_per_node=2 trainer.nnodes=1\n")
    )
    assert command.endswith("--config THIS_FILE --nproc-per-node 2")
    assert [note for note in notes if "trainer.n_gpus_per_node" in note] == [
        "trainer.n_gpus_per_node=2, trainer.nnodes=1: --nproc-per-node 2 in the command above"
    ]
    yaml_source = convert(
        tmp_path,
        "algorithm: {adv_estimator: grpo}\ntrainer: {n_gpus_per_node: 4}\n"
        "actor_rollout_ref: {model: {path: /m}}\n",
        "ppo.yaml",
    )
    assert not [note for note in yaml_source.notes if PASS_FLAGS in note], yaml_source.notes


def test_an_sft_config_without_torchrun_keeps_the_note_to_pass_them(tmp_path):
    """No command starts verl's SFT trainer in a YAML: its trainer.n_gpus_per_node is carried
    by nothing, and the note saying how to start that many stays."""
    conversion = convert(
        tmp_path,
        "data: {train_files: /d/train.parquet, micro_batch_size_per_gpu: 2}\n"
        "model: {partial_pretrain: /m}\ntrainer: {n_gpus_per_node: 8}\n",
        "sft.yaml",
    )
    assert conversion.command == "sft"
    assert f"verl's trainer.n_gpus_per_node is ignored: a launch setting here: {PASS_FLAGS}" in (
        conversion.notes
    )


@pytest.mark.parametrize(
    "meeting, endpoint, unknown",
    [
        (
            "--master_addr=$MASTER_ADDR --master_port=29500",
            "{HOST}:29500",
            "--master_addr=$MASTER_ADDR",
        ),
        (
            "--master_addr=$MASTER_ADDR --master_port 29601",
            "{HOST}:29601",
            "--master_addr=$MASTER_ADDR",
        ),
        ("--master_addr=$MASTER_ADDR", "{HOST}:29500", "--master_addr=$MASTER_ADDR"),
        ("--master_addr=node0 --master_port=$PORT", "node0:PORT", "--master_port=$PORT"),
        ("--master_addr=$A --master_port=$P", "HOST:PORT", "--master_addr=$A --master_port=$P"),
    ],
)
def test_the_known_part_of_the_endpoint_is_kept(tmp_path, meeting, endpoint, unknown):
    command, *notes = header(
        convert(tmp_path, f"torchrun --nnodes=2 --nproc_per_node=8 {meeting} {SFT}\n")
    )
    assert command.endswith(f"--nproc-per-node 8 --nnodes 2 --rdzv-endpoint {endpoint}")
    assert (
        f"--rdzv-endpoint {endpoint} in the command above: torchrun {unknown} is known only when"
        " the script runs: write the value"
    ) in notes


def test_the_endpoint_placeholder_with_a_port_is_refused_by_mfsdp_train(tmp_path):
    """`HOST:29500` would pass as a host name, and the copied command would wait minutes
    for a machine of that name; the placeholder is refused at once, as the others are."""
    script = tmp_path / "run.sh"
    script.write_text(
        "torchrun --nnodes=2 --nproc_per_node=2 --master_addr=$MASTER_ADDR --master_port=29500"
        f" {SFT}\n"
    )
    result = CliRunner().invoke(app, ["config", "from-verl", str(script)])
    assert result.exit_code == 0, result.output
    config = tmp_path / "sft.yaml"
    config.write_text(result.stdout)
    header_command = result.stdout.splitlines()[0].removeprefix("# mfsdp ").split("   (")[0]
    refused = CliRunner().invoke(app, header_command.replace("THIS_FILE", str(config)).split())
    assert refused.exit_code == 2, refused.output
    assert "--rdzv-endpoint '{HOST}:29500': '{HOST}' is not a host name" in refused.stderr
