"""A verl Megatron critic: the actor's backbone with a value head where the output layer was.

verl replaces the critic's output_layer with `LinearForLastLayer(hidden_size, 1)` (weight
[1, hidden], a bias [1] with verl's own class), tied model or not. `validate --role critic`
checked that head's rows against the config's vocab_size ("1 rows, fewer than the config's
vocab_size") and failed every real critic. The head is now checked as a value head, the
rest as the actor's model; inspect names it; export refuses the critic in one line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.support.interop_layouts import (
    DAMAGE,
    critic_dcp,
    maker,
    one_error_line,
    run_cli,
    verl_rl_v1,
    verl_rl_v2,
)
from tests.support.megatron_checkpoints import save_dcp
from tests.support.paths import FIXTURES

REAL = sorted(p for p in (FIXTURES / "mcore_optim").glob("*") if (p / "config.json").is_file())
HEAD = "model.module.output_layer.weight"
LAYOUTS = {"verl-rl-v1": verl_rl_v1, "verl-rl-v2": lambda f, r: verl_rl_v2(f, r, critic=True)}


def _critic(laid) -> Path:
    """The critic's role dir of a verl RL step."""
    return laid.levels["step"] / "critic"


def _critic_dcp_dir(laid) -> Path:
    critic = _critic(laid)
    return (
        critic / "dist_ckpt" if (critic / "dist_ckpt").is_dir() else critic / "model" / "dist_ckpt"
    )


@pytest.fixture(params=["made", *(p.name for p in REAL)])
def fixture_dir(request, made_optim) -> Path:
    return made_optim if request.param == "made" else FIXTURES / "mcore_optim" / request.param


@pytest.mark.parametrize("kind", list(LAYOUTS))
def test_a_verl_critic_validates_with_its_value_head(kind, fixture_dir, tmp_path):
    """Was: exit 1, "1 rows, fewer than the config's vocab_size"."""
    laid = LAYOUTS[kind](fixture_dir, tmp_path)
    code, stdout, err = run_cli(
        "ckpt", "validate", laid.run, "--role", "critic", "--deep", "--json"
    )
    report = json.loads(stdout)
    assert code == 0 and report["valid"] and report["findings"] == [], stdout + err
    assert report["role"] == "critic" and report["has_optimizer_state"], stdout
    code, stdout, err = run_cli("ckpt", "inspect", _critic(laid), "--role", "critic")
    hidden = json.loads((fixture_dir / "config.json").read_text())["hidden_size"]
    assert (
        code == 0 and f"value head  output_layer.weight 1x{hidden}, output_layer.bias 1" in stdout
    )
    out = tmp_path / "hf"
    code, _, err = run_cli("ckpt", "export-hf", laid.run, "--role", "critic", "--out", out)
    assert code == 2 and "value head is not a language model" in one_error_line(err), err
    assert not out.exists()


@pytest.mark.parametrize("tied", [True, False])
def test_the_configs_tying_does_not_matter(tied, made_optim, tmp_path):
    """verl replaces the output layer whatever the tying; a head without a bias
    (Megatron-Bridge's value-head class) is one too."""
    laid = verl_rl_v1(made_optim, tmp_path)
    dcp = _critic_dcp_dir(laid)
    shutil.rmtree(dcp)
    critic_dcp(made_optim, dcp, bias=False)
    config = _critic(laid) / "huggingface" / "config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | {"tie_word_embeddings": tied}))
    code, stdout, err = run_cli("ckpt", "validate", laid.run, "--role", "critic")
    assert code == 0, stdout + err


def _rewritten_critic(made_optim, tmp_path, head: dict[str, torch.Tensor]):
    """A verl RL step whose critic holds `head` as its output layer's tensors."""
    laid = verl_rl_v1(made_optim, tmp_path)
    module = maker()
    state = module.state_dict(module.CONFIG)
    state["model"].update({f"module.output_layer.{k}": v for k, v in head.items()})
    dcp = _critic_dcp_dir(laid)
    shutil.rmtree(dcp)
    save_dcp(state, dcp)
    return laid


@pytest.mark.parametrize(
    ("head", "named"),
    [
        ({}, "no output_layer.weight: a verl critic saves its value head there"),
        ({"weight": torch.zeros(32, 16)}, f"[{HEAD}]: shape (32, 16), but a value head is (1, 16)"),
        ({"weight": torch.zeros(1, 8)}, f"[{HEAD}]: shape (1, 8), but a value head is (1, 16)"),
        ({"weight": torch.zeros(1, 16), "bias": torch.zeros(2)}, "a value head's bias is (1,)"),
    ],
)
def test_what_is_no_value_head_is_named(head, named, made_optim, tmp_path):
    """An actor's weights saved as the critic (a vocabulary-sized output layer), none, or
    one of another width."""
    laid = _rewritten_critic(made_optim, tmp_path, head)
    code, stdout, err = run_cli("ckpt", "validate", laid.run, "--role", "critic")
    assert code == 1 and named in stdout, stdout + err
    if head.get("weight") is not None and head["weight"].shape[0] > 1:
        assert "a vocabulary head" in stdout


def test_a_damaged_critic_is_invalid(made_optim, tmp_path):
    laid = verl_rl_v1(made_optim, tmp_path)
    DAMAGE["coverage_gap"](_critic_dcp_dir(laid))
    code, stdout, err = run_cli("ckpt", "validate", laid.run, "--role", "critic")
    assert code == 1 and stdout.splitlines()[-1].startswith("INVALID:"), stdout + err


def test_the_actor_role_names_a_value_head_it_meets(made_optim, tmp_path):
    """A critic's dist_ckpt read as the actor's (a hand-made layout): the one-row output
    layer is named as a value head."""
    laid = verl_rl_v1(made_optim, tmp_path)
    actor_dcp = laid.levels["actor"] / "dist_ckpt"
    shutil.rmtree(actor_dcp)
    shutil.copytree(_critic_dcp_dir(laid), actor_dcp)
    config = laid.levels["actor"] / "huggingface" / "config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | {"tie_word_embeddings": False}))
    code, stdout, err = run_cli("ckpt", "validate", laid.run)
    assert code == 1 and "validate a critic with --role critic" in stdout, stdout + err
