"""A step holding no optimizer state while its writer's own record says the state was saved
is held to the rule of a state lost whole (tests/ckpt/test_optimizer_state_lost_whole.py).

Was: verl v2's `ckpt_contents.json` listing 'optimizer' in `save_contents` beside a
Megatron-FSDP DCP holding no `optimizer.*`, and Megatron-LM `args` with `no_save_optim`
None beside no optimizer entry, were both "valid ... no optimizer state" (exit 0). verl
writes the file last from what it saved: an error. Megatron-LM's save also leaves the
optimizer out, unrecorded, when given none (a model-only save under a training run's args):
a warning; a `release` step, whose optimizer Megatron-LM never loads,
and `--no-save-optim` say nothing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import (
    STEP,
    adam_state,
    mcore_weights,
    megatron_args,
    megatron_run,
    save_dcp,
)


@pytest.fixture(scope="module")
def model():
    return tiny_causal_lm("llama", vocab=64)


def _findings(path: Path, *flags: str) -> tuple[int, list[tuple[str, str]], dict]:
    code, out, _ = run_cli("ckpt", "validate", path, "--json", *flags)
    report = json.loads(out)
    found = [(f["severity"], f["message"]) for f in report["findings"]]
    return code, found, report


def _verl_v2(root: Path, model, save_contents: list[str], optimizer: bool = False) -> Path:
    """verl v2's split with Megatron-FSDP (every state in model/dist_ckpt), its
    ckpt_contents.json listing `save_contents`; the run dir."""
    run = root / "verl"
    actor = run / f"global_step_{STEP}" / "actor"
    weights = mcore_weights(model)
    state = {"model": weights}
    if optimizer:
        state["optimizer"] = adam_state(weights)
    save_dcp(state, actor / "model" / "dist_ckpt")
    hf = actor / "model" / "huggingface"
    hf.mkdir(parents=True)
    model.config.to_json_file(hf / "config.json")
    for empty in ("optimizer", "extra"):  # verl's path helpers create them, left empty
        (actor / empty / "dist_ckpt").mkdir(parents=True)
    (actor / "transformer_config.json").write_text(
        json.dumps({"num_layers": model.config.num_hidden_layers})
    )
    contents = {
        name: {"path": f"{name}/dist_ckpt", "format": "megatron_dist_checkpoint"}
        for name in ("model", "optimizer", "extra")
    }
    record = {
        "schema_version": 2,
        "framework": "megatron",
        "role": "actor",
        "global_step": STEP,
        "save_contents": save_contents,
        "contents": contents,
    }
    (actor / "ckpt_contents.json").write_text(json.dumps(record))
    (run / "latest_checkpointed_iteration.txt").write_text(str(STEP))
    return run


def test_verl_optimizer_listed_but_absent_is_the_lost_whole_error(model, tmp_path):
    run = _verl_v2(tmp_path, model, ["model", "optimizer", "extra"])
    code, found, report = _findings(run)
    count = len(mcore_weights(model))
    assert code == 1 and [f for f in found if f[0] == "error"] == [
        (
            "error",
            f"no optimizer state for the {count} parameters ckpt_contents.json records as"
            " optimized, as its save_contents lists 'optimizer':"
            " [model.module.embedding.word_embeddings.weight],"
            " [model.module.decoder.final_layernorm.weight], [model.module.output_layer.weight]"
            f" (+{count - 3} more); no record names the optimizer: Megatron's default adam",
        )
    ], found
    assert report["has_optimizer_state"] is False


@pytest.mark.parametrize(
    ("save_contents", "optimizer", "own_dir"),
    [
        (["model", "extra"], False, False),
        (["model", "optimizer", "extra"], True, False),
        (["model", "optimizer", "extra"], False, True),
    ],
    ids=["not_listed", "listed_and_held", "held_in_optimizer_dir"],
)
def test_verl_optimizer_not_listed_or_held_is_valid(
    model, save_contents, optimizer, own_dir, tmp_path
):
    """Held in the DCP, or in verl's own optimizer/dist_ckpt (not read here: no loss said)."""
    run = _verl_v2(tmp_path, model, save_contents, optimizer)
    if own_dir:
        own = run / f"global_step_{STEP}" / "actor" / "optimizer" / "dist_ckpt"
        (own / ".metadata").write_bytes(b"")
    code, found, _ = _findings(run)
    assert code == 0 and not [f for f in found if "no optimizer state for the" in f[1]], found


def _lost_warnings(found: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [f for f in found if "no optimizer state for the" in f[1]]


def test_megatron_args_saving_the_optimizer_without_one_is_a_warning(model, tmp_path):
    args = megatron_args(model, optimizer="adam", no_save_optim=None)
    run = megatron_run(tmp_path, model, args)
    code, found, _ = _findings(run)
    count = len(mcore_weights(model))
    assert code == 0 and _lost_warnings(found) == [
        (
            "warning",
            f"no optimizer state for the {count} parameters args records as optimized, as its"
            " no_save_optim is None (Megatron-LM's save also leaves the optimizer out"
            " unrecorded when given none, as a model-only save under a training run's args"
            " is: not judged damage):"
            " [model.module.embedding.word_embeddings.weight],"
            " [model.module.decoder.final_layernorm.weight], [model.module.output_layer.weight]"
            f" (+{count - 3} more); optimizer 'adam' in args",
        )
    ], found


@pytest.mark.parametrize(
    "case", ["no_save_optim", "release", "freeze_all_layers", "sgd_without_momentum"]
)
def test_megatron_model_only_saves_say_nothing(model, case, tmp_path):
    changes = {
        "no_save_optim": {"no_save_optim": True},
        "freeze_all_layers": {"no_save_optim": None, "freeze_all_layers": True},
        "sgd_without_momentum": {"no_save_optim": None, "optimizer": "sgd", "sgd_momentum": 0.0},
    }.get(case, {"no_save_optim": None})
    run = megatron_run(tmp_path, model, megatron_args(model, **changes))
    if case == "release":  # converted or exported: Megatron-LM's load never reads its optimizer
        shutil.move(run / f"iter_{STEP:07d}", run / "release")
        (run / "latest_checkpointed_iteration.txt").write_text("release")
    code, found, _ = _findings(run)
    assert code == 0 and _lost_warnings(found) == [], found
