"""A one-machine run given `--rdzv-endpoint` (`--nnodes 1`) stopped by Ctrl-C or a killed
rank is resumed by running its one command again; only a run across several machines is told
to start every machine's command again. The endpoint alone had made a one-machine run say
"start every machine's command again"."""

from __future__ import annotations

import shutil
from pathlib import Path

from cli.launch import Launch
from cli.run_report import interrupted_run
from tests.support.sft import tiny_config, write_chat_jsonl

SAVED_RUN = Path(__file__).parents[1] / "fixtures" / "megatron_fsdp_qwen2" / "run"


def _ending(tmp_path, launch: Launch) -> str:
    """The line a run of `launch` stopped by Ctrl-C ends with, its run dir holding step 2."""
    shutil.copytree(SAVED_RUN, tmp_path / "run")
    cfg = tiny_config(write_chat_jsonl(tmp_path / "train.jsonl", rows=8), tmp_path / "run")
    return interrupted_run(cfg, 0, "interrupted", launch.several_machines)


def test_one_machine_with_an_endpoint_runs_its_command_again(tmp_path):
    one = Launch(nproc_per_node=2, nnodes=1, rdzv_endpoint="127.0.0.1:29500", rdzv_id="a")
    assert one.multi_node and not one.several_machines
    assert _ending(tmp_path, one).endswith(": run the same command again to resume from it")


def test_several_machines_start_every_machines_command_again(tmp_path):
    two = Launch(nnodes=2, node_rank=0, rdzv_endpoint="127.0.0.1:29500", rdzv_id="a")
    assert two.several_machines
    again = ": start every machine's command again to resume from it"
    assert _ending(tmp_path, two).endswith(again)
