"""A key set on one machine inside a mapping left empty on another (`model.overrides`): the
empty mapping was kept as a setting of its own, so the line named `model.overrides` and a
`null` the machine was never given. It names the key that differs, with each machine's value
and "unset" where a machine has none. Two gloo ranks as two machines (`--node-rank` 0, 1)."""

import os
from pathlib import Path

from tests.support.distributed import run_distributed
from trainer.machines_agree import MachinesDisagreeError, check_same_config
from trainer.node_rank import NODE_RANK


def _check(rank: int, world_size: int, out: str) -> None:
    os.environ[NODE_RANK] = str(rank)
    overrides = {"num_hidden_layers": 3} if rank == 1 else {}
    config = {"optim": {"lr": 1e-3}, "model": {"path": "m", "overrides": overrides}}
    try:
        check_same_config(config)
    except MachinesDisagreeError as error:
        Path(out, f"rank{rank}").write_text(str(error), encoding="utf-8")


def test_a_key_set_on_one_machine_only_is_named_with_each_value(tmp_path):
    run_distributed(_check, 2, str(tmp_path))
    said = {(tmp_path / f"rank{rank}").read_text(encoding="utf-8") for rank in (0, 1)}
    assert len(said) == 1, said
    line = said.pop()
    assert line.startswith("model.overrides.num_hidden_layers: "), line
    assert "--node-rank 1 " in line and "model.overrides.num_hidden_layers=3" in line, line
    assert "--node-rank 0 " in line and "left model.overrides.num_hidden_layers unset" in line
    assert "null" not in line and "model.overrides={}" not in line, line
