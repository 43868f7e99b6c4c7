"""`data.loss_normalization`: how an SFT step weighs its target tokens.

verl's legacy `verl.trainer.fsdp_sft_trainer` (`_compute_loss_and_backward`, with its default
`data.balance_dp_token: false`) takes each micro-batch's own token mean, divides it by the
micro-batches per rank, and averages ranks; its newer `sft_trainer` and mfsdp take one token
mean over the global batch. The two give other gradients whenever micro-batches hold unequal
numbers of target tokens, and a converted fsdp_sft_trainer script trained the second with no
word. `micro_batch` now trains the first; from-verl writes it for an fsdp_sft_trainer script,
with a note; a run recorded before the key existed trained as `global`, the default, and
resumes with no change said.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mfsdp_ckpt.convert.export_hf import export_hf
from tests.support.hf_model_files import safetensors_tensors
from tests.support.sft import tiny_config
from trainer.config import SFTConfig
from trainer.data.batching import collate, global_batch, plan_micro_batches
from trainer.data.sft_dataset import load_sft_splits
from trainer.model import build_hf_config, build_model, load_tokenizer, padding_id
from trainer.sft import run_sft
from trainer.verl_import import convert_verl

SHORT, LONG = "4", "the answer is " + " ".join(str(n) for n in range(40))
# two micro-batches, a short row's and a long row's (padded: 1 row each; packed: a budget the
# two rows overflow), one step.
# AdamW's first step moves a weight by lr * g / (|g| + eps); with lr = eps = 1e6 that is g to
# within |g| / 1e6, so the saved weights give the step's gradient back.
STEP = (
    "data.global_batch_size=2",
    "data.micro_batch_size=1",
    "data.max_tokens_per_micro_batch=140",
    "data.max_length=140",
    "data.shuffle=false",
    "optim.lr=1e6",
    "optim.eps=1e6",
    "optim.weight_decay=0",
    "optim.scheduler=constant",
    "optim.clip_grad=0",
    "optim.warmup_steps=0",
    "trainer.total_steps=1",
    "checkpoint.resume=disable",
)


def _rows(path: Path) -> Path:
    with open(path, "w") as handle:
        for answer in (SHORT, LONG):
            chat = [{"role": "user", "content": "what?"}, {"role": "assistant", "content": answer}]
            handle.write(json.dumps({"messages": chat}) + "\n")
    return path


def _by_hand(cfg: SFTConfig) -> tuple[dict[str, torch.Tensor], dict[str, dict[str, torch.Tensor]]]:
    """The model's first weights, and the gradient of the step's global batch for each
    normalization, computed from the per-micro-batch token sums of the same model as verl's
    two SFT trainers weigh them."""
    tokenizer = load_tokenizer(cfg.model)
    hf_config = build_hf_config(cfg.model, tokenizer)
    train, _ = load_sft_splits(cfg.data, tokenizer, cfg.trainer.seed, progress=False)
    rows = global_batch(len(train), cfg.data.global_batch_size, 0, cfg.trainer.seed, False)
    limits = (cfg.data.packing, cfg.data.max_tokens_per_micro_batch, cfg.data.micro_batch_size)
    groups = plan_micro_batches({row: train[row] for row in rows}, *limits)
    pad = padding_id(tokenizer)
    micro_batches = [
        collate([train[row] for row in group], cfg.data.packing, pad) for group in groups
    ]
    targets = [micro_batch.targets for micro_batch in micro_batches]
    assert len(targets) == 2 and targets[0] != targets[1], targets
    gradients = {}
    for name in ("global", "micro_batch"):
        model = build_model(cfg.model, hf_config, torch.device("cpu"), cfg.trainer.seed)
        first = {key: value.detach().clone() for key, value in model.state_dict().items()}
        sums = [model(**micro_batch.inputs) for micro_batch in micro_batches]
        if name == "global":
            loss = sum(sums) / sum(targets)
        else:  # fsdp_sft_trainer: sum / valid tokens / n_micro_batches, one rank
            loss = sum(part / count / len(sums) for part, count in zip(sums, targets))
        loss.backward()
        gradients[name] = {key: p.grad.clone() for key, p in model.named_parameters()}
    return first, gradients


@pytest.mark.parametrize("packing", ["true", "false"])
def test_each_normalization_trains_the_gradient_of_its_verl_trainer(tmp_path, packing):
    data = _rows(tmp_path / "rows.jsonl")
    overrides = (*STEP, f"data.packing={packing}")
    first, gradients = _by_hand(tiny_config(data, tmp_path / "unused", *overrides))
    difference = (
        gradients["micro_batch"]["model.norm.weight"] - gradients["global"]["model.norm.weight"]
    )
    assert difference.abs().max() > 1e-3 * gradients["global"]["model.norm.weight"].abs().max()
    for name, gradient in gradients.items():
        run = tmp_path / name
        run_sft(tiny_config(data, run, *overrides, f"data.loss_normalization={name}"))
        export_hf(run, tmp_path / f"{name}.hf", dtype="fp32")
        trained = safetensors_tensors(tmp_path / f"{name}.hf")
        assert set(gradient) <= set(trained) | {"lm_head.weight"}
        for key, grad in gradient.items():
            if key in trained:
                torch.testing.assert_close(first[key] - trained[key], grad, rtol=1e-3, atol=1e-6)


def _converted(tmp_path: Path, module: str) -> dict:
    script = tmp_path / f"{module}.sh"
    script.write_text(f"torchrun -m {module} data.train_batch_size=8\n")
    conversion = convert_verl(script)
    notes = [note for note in conversion.notes if note.startswith("data.loss_normalization")]
    return {"value": conversion.tree["data"].get("loss_normalization"), "notes": notes}


def test_a_legacy_sft_trainer_script_converts_to_micro_batch_with_a_note(tmp_path):
    converted = _converted(tmp_path, "verl.trainer.fsdp_sft_trainer")
    assert converted["value"] == "micro_batch"
    assert len(converted["notes"]) == 1
    assert "takes each micro-batch's own token mean and averages them" in converted["notes"][0]


def test_the_newer_sft_trainer_script_keeps_the_global_mean(tmp_path):
    converted = _converted(tmp_path, "verl.trainer.sft_trainer")
    assert converted == {"value": None, "notes": []}
    assert SFTConfig().data.loss_normalization == "global"


def test_a_run_recorded_before_the_key_resumes_with_no_change_said(tmp_path, capsys):
    data = _rows(tmp_path / "rows.jsonl")
    run = tmp_path / "run"
    first = (*STEP[:-2], "trainer.total_steps=2", "trainer.stop_at_step=1")
    run_sft(tiny_config(data, run, *first, "checkpoint.resume=auto"))
    recorded = run / "config.yaml"
    lines = recorded.read_text().splitlines(keepends=True)
    kept = [line for line in lines if line.strip() != "loss_normalization: global"]
    assert len(kept) == len(lines) - 1, "the record holds the key once"
    recorded.write_text("".join(kept))
    uninterrupted = tmp_path / "whole"
    whole = run_sft(tiny_config(data, uninterrupted, *STEP[:-2], "trainer.total_steps=2"))
    capsys.readouterr()
    resumed = run_sft(tiny_config(data, run, *STEP[:-2], "trainer.total_steps=2"))
    assert "settings changed" not in capsys.readouterr().err
    assert resumed.losses[2] == pytest.approx(whole.losses[2], rel=1e-6)
    assert not list(run.glob("config.until_step_*.yaml"))
