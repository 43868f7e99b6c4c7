"""GRPO with LoRA on FSDP2 (CPU): the reference is the actor with its adapter off (exactly the
base model), the rollout engines get the merged weights (hf and vllm), a step checkpoints the
adapter only and resumes exactly, and the policy learns the task the full-parameter test uses."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from mfsdp_ckpt.format.manifest import read_manifest
from mfsdp_ckpt.lora import parse_adapter_key
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.grpo.test_grpo_learning import _curve
from tests.grpo.test_grpo_learning import _overrides as learning_overrides
from tests.grpo.test_grpo_runner import (
    MFSDP,
    REPO,
    task,  # noqa: F401  (fixture)
)
from tests.grpo.test_grpo_runner import _overrides as runner_overrides
from tests.support.distributed import run_distributed
from tests.support.metrics import read_metrics
from tests.support.override_lists import replaced
from tests.support.rollout import PROMPTS
from trainer.config import ModelConfig, OptimConfig, StrategyConfig, load_config
from trainer.grpo.config import GRPOConfig
from trainer.grpo.runner import run_grpo
from trainer.rollout.vllm_engine import vllm_available

RANK, ALPHA = 4, 8
# q and v but not k, up but not gate: an engine that fuses q/k/v or gate/up must still get k
# and gate back whole when only the adapted modules' neighbourhood is pushed
TARGETS = ["q_proj", "v_proj", "up_proj"]
LORA = [f"model.lora_rank={RANK}", f"model.lora_alpha={ALPHA}"]


def _lora_model(base: Path, lora: bool) -> tuple[torch.nn.Module, object]:
    from trainer.grpo.actor import attach_logprob_forward
    from trainer.model import build_hf_config, build_model, load_tokenizer

    cfg = ModelConfig(
        path=str(base), lora_rank=RANK if lora else 0, lora_alpha=ALPHA, target_modules=TARGETS
    )
    hf_config = build_hf_config(cfg, load_tokenizer(cfg))
    model = build_model(cfg, hf_config, torch.device("cpu"), seed=0)
    torch.manual_seed(1)
    with torch.no_grad():  # B starts at 0: move it so the adapter changes the model
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.normal_(0.0, 0.3)
    attach_logprob_forward(model)
    return model, hf_config


def _rollout_data():
    from trainer.grpo.actor import RolloutData, left_pad

    prompt_ids, prompt_mask = left_pad(PROMPTS, pad_id=0)
    generator = torch.Generator().manual_seed(5)
    response_ids = torch.randint(3, 256, (len(PROMPTS), 6), generator=generator)
    response_mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3, [1] * 5 + [0]])
    return RolloutData(prompt_ids, prompt_mask, response_ids, response_mask)


def _peft_model(base: Path, state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """Plain transformers + PEFT (no sharding, no merge) holding `state`: what the engine
    must compute."""
    from peft import LoraConfig, inject_adapter_in_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=TARGETS, lora_dropout=0.0)
    inject_adapter_in_model(config, model)
    model.load_state_dict(state, strict=True)
    return model.eval()


def _reference_and_push(rank: int, world_size: int, root: str) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from transformers import AutoModelForCausalLM

    from trainer.distributed import DistEnv
    from trainer.grpo.actor import compute_log_probs, model_inputs
    from trainer.grpo.weights import iter_merged_weights
    from trainer.lora import adapters_disabled, lora_scales
    from trainer.rollout.hf import HFRolloutEngine
    from trainer.strategies.fsdp2 import FSDP2Strategy

    root = Path(root)
    env = DistEnv(rank, world_size, rank, torch.device("cpu"), started_group=False)
    strategy = FSDP2Strategy(StrategyConfig(name="fsdp2"), env)
    actor, hf_config = _lora_model(root / "base", lora=True)
    actor = strategy.wrap(actor)
    base = strategy.wrap(_lora_model(root / "base", lora=False)[0]).eval()
    data, cpu = _rollout_data(), torch.device("cpu")

    def log_probs(model):
        return compute_log_probs(model, data, 2, 1.0, cpu)

    base_lp = log_probs(base)
    adapted_lp = log_probs(actor)
    with adapters_disabled(actor):
        reference_lp = log_probs(actor)
    assert torch.equal(reference_lp, base_lp)  # exactly the base model, on sharded modules
    assert (adapted_lp - base_lp).abs().max() > 1e-2  # the adapter does change the model
    assert torch.equal(log_probs(actor), adapted_lp)  # and is back on afterwards

    engine = HFRolloutEngine(AutoModelForCausalLM.from_config(hf_config), [2], 0)
    ids = torch.tensor([PROMPTS[0] + PROMPTS[2]])

    def check_engine(full_state: dict) -> torch.Tensor:
        expected = _peft_model(root / "base", full_state)
        with torch.no_grad():
            got = engine.model(input_ids=ids).logits
            torch.testing.assert_close(got, expected(input_ids=ids).logits, atol=1e-5, rtol=0)
        return got

    full_options = StateDictOptions(full_state_dict=True)
    first = dict(iter_merged_weights(strategy.weights_state(actor), lora_scales(actor)))
    engine.update_weights(first.items())
    before = check_engine(get_model_state_dict(actor, options=full_options))

    optimizer = strategy.build_optimizer(actor, OptimConfig(lr=1e-2, weight_decay=0.0))
    kwargs, _ = model_inputs(data, torch.arange(data.rows), cpu)
    actor.train()
    (-actor(**kwargs)[0].sum()).backward()
    for name, param in actor.named_parameters():
        assert (param.grad is not None) == (".lora_" in name), name  # only the adapter learns
    optimizer.step()
    with adapters_disabled(actor):
        assert torch.equal(log_probs(actor), base_lp)  # the update left the base alone

    scales = lora_scales(actor)
    update = dict(iter_merged_weights(strategy.weights_state(actor), scales, adapted_only=True))
    engine.update_weights(update.items())
    full = get_model_state_dict(actor, options=full_options)
    after = check_engine(full)
    assert (after - before).abs().max() > 1e-3  # the update reached the engine
    sent = set(update)
    assert {"model.layers.0.self_attn.k_proj.weight", "model.layers.1.mlp.gate_proj.weight"} < sent
    assert "model.layers.0.self_attn.q_proj.bias" in sent
    assert not any(
        part in name for name in sent for part in ("embed_tokens", "norm", "lm_head", "lora_")
    )
    assert sent < set(first) and "model.embed_tokens.weight" in first
    if rank == 0:
        torch.save({"first": first, "update": update, "full": full}, root / "pushes.pt")


@pytest.fixture(scope="module")
def pushes(tmp_path_factory) -> Path:
    from trainer.tiny import build_tiny_model_dir

    root = tmp_path_factory.mktemp("lora_grpo")
    build_tiny_model_dir(root / "base", seed=0, with_weights=True)
    run_distributed(_reference_and_push, 2, str(root))
    return root


def test_reference_is_the_base_and_the_hf_engine_gets_merged_weights(pushes):
    assert (pushes / "pushes.pt").is_file()  # every check ran on both ranks


def _vllm_engine(_rank: int, _world: int, root: str, results: dict) -> None:
    """vLLM from dummy weights, given the full merged push and then an update's partial one
    (own process: vLLM changes process-wide torch settings)."""
    from trainer.rollout.base import SamplingParams
    from trainer.rollout.vllm_engine import VLLMRolloutEngine

    pushed = torch.load(Path(root) / "pushes.pt")
    engine = VLLMRolloutEngine(
        str(Path(root) / "base"),
        dtype="float32",
        max_model_len=128,
        enforce_eager=True,
        load_format="dummy",
    )
    greedy = SamplingParams(temperature=0, max_tokens=8, logprobs=True)
    engine.update_weights(pushed["first"].items())
    results["before"] = engine.generate(PROMPTS, greedy)
    engine.update_weights(pushed["update"].items())
    results["after"] = engine.generate(PROMPTS, greedy)


@pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")
def test_vllm_engine_gets_merged_weights_and_partial_updates(pushes):
    from tests.support.rollout import reference_logprobs

    results = mp.Manager().dict()
    run_distributed(_vllm_engine, 1, str(pushes), results)
    expected = _peft_model(pushes / "base", torch.load(pushes / "pushes.pt")["full"])
    after = results["after"]
    for row, prompt in enumerate(PROMPTS):
        response = after.token_lists()[row]
        with torch.no_grad():
            greedy = expected.generate(
                torch.tensor([prompt]),
                max_new_tokens=8,
                do_sample=False,
                eos_token_id=2,
                pad_token_id=0,
            )
        assert response == greedy[0, len(prompt) :].tolist()
        logprobs = reference_logprobs(expected, prompt, response)
        torch.testing.assert_close(
            after.logprobs[row, : len(response)], logprobs, atol=1e-4, rtol=0
        )
    assert results["before"].token_lists() != after.token_lists()  # the partial push took effect


def _dist_ckpt_tensors(step_dir: Path) -> dict[str, torch.Tensor]:
    reader = CheckpointReader(step_dir / "dist_ckpt")
    return {name: reader.read_tensor(name) for name in reader.tensors}


def _step_records(run_dir: Path) -> dict[int, dict]:
    return {r["step"]: r for r in read_metrics(run_dir) if "reward/mean" in r}


def test_lora_grpo_checkpoints_the_adapter_and_resumes_exactly(task):  # noqa: F811
    from mfsdp_ckpt.check.validate import validate_checkpoint

    root, files, reward = task
    targets = f"model.target_modules=[{','.join(TARGETS)}]"

    def run(name: str, *extra: str):
        overrides = runner_overrides(root, files, reward, name) + LORA + [targets, *extra]
        return run_grpo(load_config(GRPOConfig, None, overrides))

    straight = run("lora_straight")
    assert run("lora_split", "trainer.stop_at_step=2").final_step == 2
    second = run("lora_split")
    assert second.resumed_from == 2 and second.final_step == 4
    a, b = _step_records(root / "lora_straight"), _step_records(root / "lora_split")
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    for step in (3, 4):
        for key in ("reward/mean", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
            assert b[step][key] == a[step][key], (step, key)  # bitwise
    assert a[4]["actor/kl_loss"] > 0 and "timing/ref_log_prob_s" in a[4]
    assert max(r["rollout/actor_logprob_diff"] for r in a.values()) < 1e-4  # merged push

    final_a = _dist_ckpt_tensors(straight.last_checkpoint)
    final_b = _dist_ckpt_tensors(second.last_checkpoint)
    assert final_a.keys() == final_b.keys()
    for name in final_a:
        assert torch.equal(final_a[name], final_b[name]), name  # adapter and optimizer state
    model_keys = [k.removeprefix("model.") for k in final_a if k.startswith("model.")]
    adapted = {parse_adapter_key(k).module.rsplit(".", 1)[-1] for k in model_keys}
    assert all(map(parse_adapter_key, model_keys)) and adapted == set(TARGETS)
    assert len(model_keys) == 2 * 2 * len(TARGETS)  # A and B, 2 layers: the base is not saved
    moments = [k for k in final_a if k.endswith((".exp_avg", ".exp_avg_sq"))]
    assert len(moments) == 2 * len(model_keys)

    manifest = read_manifest(second.last_checkpoint / "manifest.json")
    assert manifest.lora["r"] == RANK and manifest.lora["target_modules"] == sorted(TARGETS)
    assert manifest.base_model["random_init"] and manifest.base_model["seed"] == 0
    assert manifest.info["reference_model"]["lora_adapter"] == "disabled"
    assert validate_checkpoint(second.last_checkpoint, deep=True).ok()


@pytest.mark.slow
def test_lora_grpo_learns(grpo_warm_start):
    """The full-parameter learning test's task, reward and warm start
    (tests/grpo/test_grpo_learning.py), training a rank-8 adapter instead: the reward rises as
    there, at a 3x higher learning rate (usual for LoRA)."""
    root, know = grpo_warm_start
    steps = 8
    overrides = replaced(
        learning_overrides(root, know, "grpo_lora", "hf"),
        "model.lora_rank=8",
        "model.lora_alpha=16",
        "optim.lr=3e-3",
        f"trainer.total_steps={steps}",
        "trainer.eval_every=4",
    )
    run_grpo(load_config(GRPOConfig, None, overrides))
    rewards, val = _curve(root / "grpo_lora")
    assert len(rewards) == steps
    assert rewards[0] < 0.2 and val[0] < 0.2, (rewards, val)
    assert sum(rewards[-5:]) / 5 > 0.5, rewards
    assert val[-1] > 0.5, val
    diffs = [r["rollout/actor_logprob_diff"] for r in _step_records(root / "grpo_lora").values()]
    assert max(diffs) < 1e-4  # the engine samples from exactly the merged actor, every step


def test_merged_push_refuses_names_it_cannot_match():
    from trainer.grpo.weights import iter_merged_weights

    state = {"module.model.layers.0.self_attn.q_proj.base_layer.weight": torch.zeros(2, 2)}
    scales = {"model.layers.0.self_attn.q_proj": ("default", 2.0)}
    with pytest.raises(KeyError, match=r"no model\.layers\.0\.self_attn\.q_proj\.base_layer"):
        list(iter_merged_weights(state, scales))


@pytest.mark.parametrize(
    "engine",
    ["hf", pytest.param("vllm", marks=pytest.mark.skipif(not vllm_available(), reason="no vLLM"))],
)
def test_two_ranks(task, engine):  # noqa: F811
    """LoRA GRPO over 2 gloo ranks through the CLI: each rank's engine gets the merged weights
    gathered from both ranks' shards, in full and then partial pushes (its log-probs equal the
    actor's)."""
    root, files, reward = task
    run = f"lora_two_{engine}"
    done = subprocess.run(
        MFSDP
        + ["train", "grpo", "--nproc-per-node", "2", "--json"]
        + replaced(
            runner_overrides(root, files, reward, run, steps=2),
            *LORA,
            f"rollout.name={engine}",
            "rollout.enforce_eager=true",
        ),
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1"},
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["final_step"] == 2  # the JSON object alone: vLLM logs on stderr
    records = list(_step_records(root / run).values())
    assert len(records) == 2 and records[-1]["actor/kl_loss"] > 0
    assert max(r["rollout/actor_logprob_diff"] for r in records) < 1e-4
