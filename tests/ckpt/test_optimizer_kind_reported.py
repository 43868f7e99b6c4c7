"""inspect and validate say which optimizer's state a checkpoint holds, and validate holds
the states to the optimizer the run's own record names.

Was: the optimizer was recognised from the state names (to check every parameter holds its
set) but no output named it: inspect said "optimizer state optimizer.state.* (123
tensors)", validate "optimizer state", and their JSON had no key for it (`weights.optimizer`
is the entry's name). A Megatron-LM checkpoint whose args say `optimizer='sgd'` beside
Adam's moments was "valid" without a word, though a resume with that setting cannot use
them. Now both commands say "Adam (exp_avg, exp_avg_sq, step)" (inspect on its weights
line, validate "Adam optimizer state" in its verdict line; JSON: top-level
`optimizer_kind`), for mfsdp's own checkpoints, verl's and Megatron-LM's, and states that
lack one the record's own optimizer keeps are one error naming both (a resume with that
setting fails to load them); states beside SGD without momentum, which keeps none, are a
warning. Only where the record itself names the optimizer and its states are known here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli, verl_rl_v1
from tests.support.megatron_checkpoints import (
    adam_state,
    bridge_run,
    mcore_weights,
    megatron_args,
    megatron_run,
    save_dcp,
)
from tests.support.paths import FIXTURES

ADAM = {"name": "Adam", "states": ["exp_avg", "exp_avg_sq", "step"]}
ADAM_SAID = "Adam (exp_avg, exp_avg_sq, step)"


def _ours(root: Path) -> Path:
    return FIXTURES / "megatron_fsdp_qwen2" / "run"  # mfsdp's own, saved with AdamW


def _verl(root: Path) -> Path:
    return verl_rl_v1(FIXTURES / "mcore_optim" / "llama", root).run  # a real Megatron-core save


def _megatron_lm(root: Path) -> Path:
    model = tiny_causal_lm("qwen3_moe")
    return megatron_run(root, model, megatron_args(model), optimizer=True)


def _hf_trainer(root: Path) -> Path:
    """The Hugging Face Trainer's checkpoint: its optimizer state in a DCP dir of its own."""
    from tests.ckpt.test_interop_hf_trainer import save_trainer_checkpoint
    from trainer.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    model = tiny_causal_lm("qwen2", vocab=len(tokenizer))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    return save_trainer_checkpoint(root / "output", 1, model, optimizer, tokenizer)


def _cli(*args) -> tuple[int, str, str]:
    return run_cli("ckpt", *args)


@pytest.mark.parametrize(
    "build",
    [_ours, _verl, _megatron_lm, _hf_trainer],
    ids=["mfsdp", "verl", "megatron", "hf-trainer"],
)
def test_inspect_and_validate_name_the_optimizer(build, tmp_path):
    run = build(tmp_path)
    code, out, err = _cli("inspect", run)
    assert code == 0, out + err
    (weights,) = [line for line in out.splitlines() if line.startswith("weights ")]
    assert weights.endswith(f" tensors): {ADAM_SAID}"), weights
    code, out, err = _cli("inspect", run, "--json")
    assert code == 0 and json.loads(out)["optimizer_kind"] == ADAM, out + err

    code, out, err = _cli("validate", run)
    (verdict,) = out.splitlines()
    assert code == 0 and verdict.startswith("valid: ") and ", Adam optimizer state" in verdict, out
    code, out, err = _cli("validate", run, "--json")
    report = json.loads(out)
    assert code == 0 and report["optimizer_kind"] == ADAM, out + err
    assert not [f for f in report["findings"] if "optimizer" in f["message"]], report


def _megatron_states(root: Path, states: dict | None, **args) -> Path:
    """A Megatron-LM run whose optimizer holds `states` (per-parameter name -> tensor like
    the parameter; None: Adam's) for every parameter, `args` changed as given."""
    model = tiny_causal_lm("llama", vocab=64)

    def held(adam: dict) -> dict:
        if states is not None:
            adam["state"] = {
                param: {name: torch.zeros_like(held["exp_avg"]) for name in states}
                for param, held in adam["state"].items()
            }
        return adam

    return megatron_run(root, model, megatron_args(model, **args), optimizer=held)


def _validated(run: Path) -> tuple[int, dict, list[tuple[str, str, str]]]:
    code, out, _ = _cli("validate", run, "--json")
    report = json.loads(out)
    return code, report, [(f["severity"], f["where"], f["message"]) for f in report["findings"]]


def test_another_optimizers_states_are_named_as_theirs(tmp_path):
    run = _megatron_states(tmp_path, {"momentum_buffer": None}, optimizer="sgd", sgd_momentum=0.9)
    code, report, findings = _validated(run)
    kind = {"name": "SGD", "states": ["momentum_buffer"]}
    assert code == 0 and findings == [] and report["optimizer_kind"] == kind, report
    code, out, _ = _cli("inspect", run, "--json")
    assert json.loads(out)["optimizer_kind"] == kind
    code, out, _ = _cli("validate", run)
    assert ", SGD optimizer state" in out.splitlines()[-1], out


def test_states_no_known_optimizer_keeps_are_named_without_one(tmp_path):
    run = _megatron_states(tmp_path, {"state1": None, "qmap1": None})
    _, report, _ = _validated(run)
    assert report["optimizer_kind"] == {"name": None, "states": ["qmap1", "state1"]}, report
    _, out, _ = _cli("inspect", run)
    assert "optimizer.state.* (" in out and "): no known optimizer's (qmap1, state1)" in out, out


def test_no_optimizer_state_names_no_optimizer(tmp_path):
    model = tiny_causal_lm("llama", vocab=64)
    run = megatron_run(tmp_path, model, megatron_args(model))
    code, report, _ = _validated(run)
    assert code == 0 and report["optimizer_kind"] is None and not report["has_optimizer_state"]
    code, out, _ = _cli("inspect", run, "--json")
    assert json.loads(out)["optimizer_kind"] is None
    code, out, _ = _cli("validate", run)
    assert "optimizer state:" not in out and "no optimizer state" in out.splitlines()[-1], out


FIRST = "[optimizer.state.module.module.module.embedding.word_embeddings.weight.exp_avg]"


# args -> the states every parameter holds, and what the one error says of them
RECORD_CONTRADICTED = {
    "sgd with momentum, Adam's states": (
        {"optimizer": "sgd", "sgd_momentum": 0.9},
        None,
        "optimizer state is Adam (exp_avg, exp_avg_sq, step), not what optimizer 'sgd' in"
        " args keeps (SGD's momentum_buffer): no parameter holds momentum_buffer",
    ),
    "adam, SGD's states": (
        {"optimizer": "adam"},
        {"momentum_buffer": None},
        "optimizer state is SGD (momentum_buffer), not what optimizer 'adam' in args keeps"
        " (Adam's exp_avg, exp_avg_sq): no parameter holds exp_avg, exp_avg_sq",
    ),
    "adam, every exp_avg_sq lost": (
        {"optimizer": "adam"},
        {"exp_avg": None, "step": None},
        "optimizer state is no known optimizer's (exp_avg, step), not what optimizer 'adam'"
        " in args keeps (Adam's exp_avg, exp_avg_sq): no parameter holds exp_avg_sq",
    ),
}
RESUME_FAILS = "; a resume with that setting cannot load these states"


@pytest.mark.parametrize("case", list(RECORD_CONTRADICTED))
def test_states_lacking_what_the_recorded_optimizer_keeps_are_one_error(case, tmp_path):
    """Was: exit 0 "valid" (a warning, or for a set no optimizer keeps only "no known
    optimizer's"), though Megatron-LM resuming with the recorded optimizer fails its strict
    load on the states it lacks."""
    args, states, said = RECORD_CONTRADICTED[case]
    run = _megatron_states(tmp_path, states, **args)
    code, report, findings = _validated(run)
    assert code == 1 and not report["valid"], report
    assert [(severity, message) for severity, _, message in findings] == [
        ("error", said + RESUME_FAILS)
    ], findings
    code, out, err = _cli("validate", run, "--deep")
    assert code == 1 and out.count("error: ") + err.count("error: ") == 1, out + err


def test_states_beside_sgd_without_momentum_are_a_warning_only(tmp_path):
    """SGD without momentum keeps no state: the resume reads none of these, and works."""
    run = _megatron_states(tmp_path, None, optimizer="sgd", sgd_momentum=0.0)
    code, report, findings = _validated(run)
    assert code == 0 and report["valid"] and report["optimizer_kind"] == ADAM, report
    assert findings == [
        (
            "warning",
            FIRST,
            "optimizer state is Adam's, but the run's record names an optimizer that keeps"
            " none (optimizer 'sgd' in args without momentum); a resume with that setting"
            " does not use these states",
        )
    ]
    code, _, err = _cli("validate", run, "--strict")
    assert code == 1, err


@pytest.mark.parametrize(
    ("states", "args"),
    [
        (None, {"optimizer": "adam"}),  # agree
        ({"momentum_buffer": None}, {}),  # args name none: Megatron's default is no record
        (None, {"optimizer": "muon"}),  # its states are not known here
    ],
    ids=["agree", "unnamed", "unknown"],
)
def test_no_warning_unless_both_are_known(states, args, tmp_path):
    run = _megatron_states(tmp_path, states, **args)
    code, report, findings = _validated(run)
    assert code == 0 and findings == [] and report["optimizer_kind"] is not None, report


def test_bridge_run_config_naming_another_optimizer_is_an_error(tmp_path):
    model = tiny_causal_lm("llama", vocab=64)
    run = bridge_run(tmp_path, model, steps=(10,))
    step = run / "iter_0000010"
    weights = mcore_weights(model)
    save_dcp({"model": weights, "optimizer": adam_state(weights)}, step)
    config = yaml.safe_load((step / "run_config.yaml").read_text())
    config["optimizer"] = {"optimizer": "sgd", "sgd_momentum": 0.9, "lr": 1e-4}
    (step / "run_config.yaml").write_text(yaml.safe_dump(config))
    code, report, findings = _validated(run)
    assert code == 1 and report["optimizer_kind"] == ADAM, report
    assert [(severity, message) for severity, _, message in findings] == [
        (
            "error",
            f"optimizer state is {ADAM_SAID}, not what optimizer 'sgd' in run_config.yaml's"
            " optimizer section keeps (SGD's momentum_buffer): no parameter holds"
            " momentum_buffer" + RESUME_FAILS,
        )
    ]
