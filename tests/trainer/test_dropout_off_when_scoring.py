"""Passes that score rather than train run with dropout off (`trainer.model.eval_mode`), as
verl's compute_log_prob does: SFT's validation loss, GRPO's old and reference log-probs.
With a model whose config asks for dropout and an lr of 0, the validation loss changed from
step to step, and the old log-probs disagreed with the engine's for the same weights."""

from __future__ import annotations

import torch

from tests.support.metrics import read_metrics
from tests.support.sft import tiny_config, write_chat_jsonl
from trainer.config import ModelConfig, load_config
from trainer.grpo.actor import RolloutData, attach_logprob_forward, compute_log_probs
from trainer.grpo.config import GRPOConfig
from trainer.grpo.runner import run_grpo
from trainer.grpo.synthetic import write_addition_data
from trainer.model import build_hf_config, build_model, load_tokenizer
from trainer.sft import run_sft

DROPOUT = "model.overrides={attention_dropout: 0.5}"
FROZEN = ("optim.lr=0", "optim.min_lr=0", "optim.weight_decay=0")


def test_sft_validation_loss_of_unchanged_weights_is_the_same_every_step(tmp_path):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=40)
    cfg = tiny_config(
        data,
        tmp_path / "run",
        DROPOUT,
        *FROZEN,
        "trainer.total_steps=3",
        "data.global_batch_size=8",
        "data.val_ratio=0.2",
        "trainer.eval_every=1",
        "trainer.device=cpu",
        "strategy.name=fsdp2",
    )
    result = run_sft(cfg)
    assert sorted(result.eval_losses) == [1, 2, 3]
    assert len(set(result.eval_losses.values())) == 1, result.eval_losses


def test_log_probs_are_scored_in_eval_mode_and_the_mode_is_restored():
    cfg = ModelConfig(overrides={"attention_dropout": 0.5})
    tokenizer = load_tokenizer(cfg)
    model = build_model(cfg, build_hf_config(cfg, tokenizer), torch.device("cpu"), seed=0)
    attach_logprob_forward(model)
    generator = torch.Generator().manual_seed(0)
    data = RolloutData(
        prompt_ids=torch.randint(3, 100, (4, 6), generator=generator),
        prompt_mask=torch.ones(4, 6, dtype=torch.long),
        response_ids=torch.randint(3, 100, (4, 5), generator=generator),
        response_mask=torch.ones(4, 5, dtype=torch.long),
    )
    assert model.training
    first = compute_log_probs(model, data, 2, 1.0, torch.device("cpu"))
    assert model.training  # the update that follows trains as configured
    model.eval()
    expected = compute_log_probs(model, data, 2, 1.0, torch.device("cpu"))
    torch.testing.assert_close(first, expected, rtol=0, atol=0)


def test_grpo_old_log_probs_match_the_engines_under_dropout(tmp_path):
    """`rollout/actor_logprob_diff` compares the engine's log-probs (it samples in eval mode)
    with the actor's old log-probs of the same tokens and weights: was 0.07 with dropout."""
    files = write_addition_data(tmp_path / "data", digits=2)
    reward = tmp_path / "reward.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return min(len(solution_str), 8) / 8\n"
    )
    overrides = [
        f"data.train_files={files['rl_train']}",
        "data.max_prompt_length=32",
        "data.train_batch_size=2",
        "actor.ppo_mini_batch_size=2",
        "actor.ppo_micro_batch_size_per_gpu=4",
        "actor.log_prob_micro_batch_size_per_gpu=4",
        "rollout.n=2",
        "rollout.max_response_length=6",
        "rollout.name=hf",
        f"reward.path={reward}",
        "trainer.total_steps=1",
        f"trainer.run_dir={tmp_path / 'run'}",
        "trainer.progress_bar=false",
        "trainer.device=cpu",
        "strategy.name=fsdp2",
        DROPOUT,
        *FROZEN,
    ]
    run_grpo(load_config(GRPOConfig, None, overrides))
    (record,) = [r for r in read_metrics(tmp_path / "run") if "reward/mean" in r]
    assert record["rollout/actor_logprob_diff"] < 1e-5, record
