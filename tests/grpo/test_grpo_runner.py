"""The GRPO runner end to end on the tiny model: exact resume, two ranks, data rules, CLI errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.cli_errors import one_error
from tests.support.data_tables import write_parquet
from tests.support.distributed import run_distributed
from tests.support.metrics import read_metrics
from tests.support.paths import REPO
from trainer.config import load_config
from trainer.data.math_datasets import gsm8k_rows
from trainer.grpo.config import GRPOConfig, RLDataConfig
from trainer.grpo.data import RLDataError, load_rl_prompts
from trainer.grpo.runner import run_grpo
from trainer.grpo.synthetic import write_addition_data
from trainer.rollout.vllm_engine import vllm_available
from trainer.tiny import build_tokenizer

MFSDP = [sys.executable, "-c", "from cli.main import main; main()"]
COMPARED = (
    "reward/mean",
    "actor/pg_loss",
    "actor/kl_loss",
    "actor/grad_norm",
    "actor/entropy",
    "actor/ppo_kl",
)


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpo")
    files = write_addition_data(root / "data", digits=4)
    reward = (
        root / "longer_is_better.py"
    )  # dense signal for a random model: longer answers score more
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return min(len(solution_str), 40) / 40\n"
    )
    return root, files, reward


def _overrides(root, files, reward, run, steps=4):
    return [
        f"data.train_files={files['rl_train']}",
        f"data.val_files={files['rl_test']}",
        "data.max_prompt_length=32",
        "data.train_batch_size=4",
        "data.val_max_samples=4",
        "actor.ppo_mini_batch_size=2",
        "actor.ppo_micro_batch_size_per_gpu=2",
        "actor.log_prob_micro_batch_size_per_gpu=3",
        "actor.ppo_epochs=2",
        "actor.loss_agg_mode=seq-mean-token-mean",
        "actor.entropy_coeff=0.01",
        "rollout.n=4",
        "rollout.max_response_length=8",
        "rollout.name=hf",
        "optim.lr=1e-3",
        f"reward.path={reward}",
        f"trainer.total_steps={steps}",
        f"trainer.run_dir={root}/{run}",
        "trainer.eval_every=2",
        "trainer.progress_bar=false",
        "trainer.device=cpu",
        "strategy.name=fsdp2",
        "checkpoint.save_every=2",
    ]


def _model_tensors(step_dir: Path) -> dict[str, torch.Tensor]:
    reader = CheckpointReader(step_dir / "dist_ckpt")
    return {name: reader.read_tensor(name) for name in reader.tensors if name.startswith("model.")}


def test_resume_computes_what_an_uninterrupted_run_computes(task):
    root, files, reward = task
    straight = run_grpo(load_config(GRPOConfig, None, _overrides(root, files, reward, "straight")))
    assert straight.final_step == 4 and straight.resumed_from is None
    first = run_grpo(
        load_config(
            GRPOConfig, None, _overrides(root, files, reward, "split") + ["trainer.stop_at_step=2"]
        )
    )
    assert first.final_step == 2
    second = run_grpo(load_config(GRPOConfig, None, _overrides(root, files, reward, "split")))
    assert second.resumed_from == 2 and second.final_step == 4
    by_step = lambda run: {r["step"]: r for r in read_metrics(root / run) if "reward/mean" in r}  # noqa: E731
    a, b = by_step("straight"), by_step("split")
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    assert a[1]["reward/mean"] != a[4]["reward/mean"]  # the policy moved
    for step in (3, 4):
        for key in COMPARED:
            assert b[step][key] == pytest.approx(a[step][key], rel=1e-5, abs=1e-7), (step, key)
    final_a, final_b = (
        _model_tensors(straight.last_checkpoint),
        _model_tensors(second.last_checkpoint),
    )
    assert final_a.keys() == final_b.keys() and final_a
    for name in final_a:
        torch.testing.assert_close(final_b[name], final_a[name], rtol=1e-5, atol=1e-6)
    manifest = json.loads((second.last_checkpoint / "manifest.json").read_text())
    assert manifest["info"]["reference_model"] == {
        "path": None,
        "shape": "tiny",
        "random_init": False,
        "seed": 0,
        "files": {},  # a random init of that seed: nothing on disk
    }
    assert manifest["info"]["run"] == "grpo"
    record = a[4]
    for key in (
        "reward/std",
        "reward/accuracy",
        "response/length_mean",
        "response/length_max",
        "actor/clipfrac",
        "timing/rollout_s",
        "timing/old_log_prob_s",
        "timing/ref_log_prob_s",
        "timing/update_s",
        "timing/weight_push_s",
        "timing/checkpoint_s",
        "perf/tokens_per_s",
        "val/accuracy",
    ):
        assert key in record, key
    assert record["actor/updates"] == 2 * 2  # ppo_epochs x (4 prompts / mini-batch of 2)
    assert record["rollout/actor_logprob_diff"] < 1e-4


@pytest.mark.parametrize(
    "engine",
    [
        "hf",
        pytest.param(
            "vllm", marks=pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")
        ),
    ],
)
def test_two_ranks(task, engine):
    """FSDP2 over 2 gloo ranks: each rank rolls out its share with its own engine; the gathered
    weights reach both engines (their log-probs equal the actor's)."""
    root, files, reward = task
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    run = f"two_{engine}"
    done = subprocess.run(
        MFSDP
        + ["train", "grpo", "--nproc-per-node", "2", "--json"]
        + _overrides(root, files, reward, run, steps=2)
        + [f"rollout.name={engine}", "rollout.enforce_eager=true"]
        + [f"trainer.rollout_data_dir={root}/{run}_samples"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)  # stdout holds the JSON object alone: vLLM logs on stderr
    assert summary["final_step"] == 2 and summary["val_accuracy"] is not None
    manifest = json.loads((root / run / "global_step_2" / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and manifest["info"]["rollout"] == engine
    records = [r for r in read_metrics(root / run) if "reward/mean" in r]
    assert len(records) == 2
    assert max(r["rollout/actor_logprob_diff"] for r in records) < 1e-4
    # rank 0 writes both ranks' samples (4 prompts x 4 responses) of each step
    for step, record in enumerate(records, start=1):
        text = (root / f"{run}_samples" / f"{step}.jsonl").read_text(encoding="utf-8")
        scores = [json.loads(line)["score"] for line in text.splitlines()]
        assert len(scores) == 16
        assert sum(scores) / 16 == pytest.approx(record["reward/mean"], abs=1e-6)


def _gather_main(rank, world, out):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    from trainer.grpo.weights import full_tensor

    mesh = init_device_mesh("cpu", (world,))
    whole = torch.arange(12.0).view(3, 4)
    results = {}
    for label, rows in (("uneven", [(0, 2), (2, 3)]), ("empty", [(0, 3), (3, 3)])):
        start, stop = rows[rank]
        local = whole[start:stop].clone()
        value = DTensor.from_local(
            local, mesh, [Shard(0)], run_check=False, shape=whole.shape, stride=whole.stride()
        )
        results[label] = full_tensor(value)
    out[rank] = results


def test_full_tensor_gathers_uneven_and_empty_shards():
    out = mp.Manager().dict()
    run_distributed(_gather_main, 2, out)
    for rank in range(2):
        for label in ("uneven", "empty"):
            torch.testing.assert_close(out[rank][label], torch.arange(12.0).view(3, 4))


def test_rl_rows_from_the_gsm8k_converter_load_unchanged(tmp_path):
    rows = [
        {"question": "Tom has 3 apples and buys 4 more. How many?", "answer": "3 + 4 = 7\n#### 7"},
        {"question": "A " + "very " * 200 + "long question?", "answer": "#### 1,000"},
    ]
    _, rl = gsm8k_rows(rows, "train")
    path = write_parquet(rl, tmp_path / "rl.parquet")
    tokenizer = build_tokenizer()
    prompts, dropped = load_rl_prompts([str(path)], RLDataConfig(max_prompt_length=128), tokenizer)
    assert dropped == 1 and len(prompts) == 1
    assert prompts[0].data_source == "openai/gsm8k" and prompts[0].ground_truth == "7"
    assert prompts[0].extra_info["index"] == 0
    text = tokenizer.decode(prompts[0].prompt_ids)
    assert text.endswith("<|im_start|>assistant\n") and "Tom has 3 apples" in text
    with pytest.raises(
        RLDataError, match=r"rl\.parquet row 2: prompt has \d+ tokens > data.max_prompt_length=128"
    ):
        load_rl_prompts(
            [str(path)],
            RLDataConfig(max_prompt_length=128, filter_overlong_prompts=False),
            tokenizer,
        )
    broken = write_parquet(
        [{"prompt": [{"role": "user", "content": "hi"}], "data_source": "x"}],
        tmp_path / "bad.parquet",
    )
    with pytest.raises(RLDataError, match=r"bad\.parquet row 1: no reward_model\.ground_truth"):
        load_rl_prompts([str(broken)], RLDataConfig(), tokenizer)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["data.train_files=/nonexistent.parquet"], "/nonexistent.parquet: no such file"),
        (
            ["data.train_batch_size=6", "actor.ppo_mini_batch_size=4"],
            "must be a multiple of actor.ppo_mini_batch_size=4",
        ),
        (["actor.kl_loss_type=k9"], "actor.kl_loss_type' expects one of"),
        (["rollout.name=sglang"], "rollout.name' expects one of"),
    ],
)
def test_cli_usage_errors(tmp_path, overrides, message):
    data = tmp_path / "train.parquet"  # the data check runs first: a file where none is named
    data.touch()
    if not any(o.startswith("data.train_files=") for o in overrides):
        overrides = [f"data.train_files={data}", *overrides]
    # within the tiny shape's 512 positions, which the default 512 + 512 tokens pass
    lengths = ["data.max_prompt_length=64", "rollout.max_response_length=64"]
    done = subprocess.run(
        MFSDP + ["train", "grpo", f"trainer.run_dir={tmp_path}/run", *lengths] + overrides,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    one_error(done.stderr, message)


def test_unnormalised_advantages_past_float32_name_the_rewards(task, tmp_path):
    """Reward minus its group's mean can pass float32's range where each reward is inside it
    (Dr. GRPO, no std division): said naming the rewards, not as a NaN gradient norm."""
    from trainer.rewards.custom import RewardFunctionError

    root, files, _ = task
    extreme = tmp_path / "extreme.py"
    extreme.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return 3.4e38 if len(solution_str) % 2 else -3.4e38\n"
    )
    overrides = _overrides(root, files, extreme, "extreme", steps=1)
    overrides += ["algorithm.norm_adv_by_std_in_grpo=false", f"trainer.run_dir={tmp_path}/run"]
    with pytest.raises(RewardFunctionError, match="give advantages past float32's range"):
        run_grpo(load_config(GRPOConfig, None, overrides))
