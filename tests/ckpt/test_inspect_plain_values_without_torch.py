"""inspect decodes non-tensor entries of plain data (a step, a learning rate, numpy's RNG
state refused by name) without importing torch, which costs ~1.5-2 CPU seconds: more than
the rest of an inspect of a checkpoint of thousands of parameters. An entry holding a tensor
still goes through torch's load, which shows the check sees an import.

Was: each decode went through torch.load, so every inspect imported torch."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from mfsdp_ckpt.checkpointer import Checkpointer
from tests.support.fresh_python import MAIN_CATCHING_EXIT, modules_after
from tests.support.interop_layouts import run_cli


def _saved(tmp_path, extra: dict):
    run = tmp_path / "run"
    Checkpointer(run, strategy="none").save(
        1, {"model": {"w": torch.randn(6, 4)}, "extra": extra}, contents=("model", "extra")
    )
    return run


PLAIN = {
    "step": 1,
    "lr": 1e-5,
    "betas": (0.9, 0.95),
    "names": ["a", "b"],
    "np_rng": np.random.get_state(),  # a numpy global: refused by name
}


@pytest.mark.parametrize("tensor", [False, True])
def test_plain_values_are_decoded_without_torch(tmp_path, tensor):
    extra = {**PLAIN, "rng": (torch.tensor([1, 2]), 3)} if tensor else PLAIN
    dist = _saved(tmp_path, extra)
    loaded = modules_after(MAIN_CATCHING_EXIT, "ckpt", "inspect", str(dist), roots=("torch",))
    assert ("torch" in loaded) == tensor, f"inspect loaded {loaded[:5]}"


def test_plain_values_are_shown_as_torch_loads_them(tmp_path):
    dist = _saved(tmp_path, PLAIN)
    code, out, err = run_cli("ckpt", "inspect", dist, "--json")
    assert code == 0, out + err
    shown = {o["name"]: o for o in json.loads(out)["objects"]}
    assert (shown["extra.step"]["kind"], shown["extra.step"]["value"]) == ("int", 1)
    assert (shown["extra.lr"]["kind"], shown["extra.lr"]["value"]) == ("float", 1e-5)
    assert shown["extra.betas"]["kind"] == "tuple" and shown["extra.names"]["kind"] == "list"
    assert shown["extra.np_rng"]["kind"] == "opaque" and shown["extra.np_rng"]["not_decoded"]
