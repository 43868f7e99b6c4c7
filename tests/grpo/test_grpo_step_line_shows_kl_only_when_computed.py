"""With `actor.use_kl_loss=false` no KL is computed, and the step line (the progress bar's
fields) has no `kl=`: it showed `kl=0.0000`, which reads as a policy that has not moved from
its reference. metrics.jsonl leaves `actor/kl_loss` out then too, as verl does
(docs/grpo.md, Metrics); with KL on, both show it."""

from __future__ import annotations

import re

import pytest

from tests.support.grpo import grpo_config, write_rl_rows
from tests.support.metrics import read_metrics
from trainer.grpo.runner import run_grpo


@pytest.mark.parametrize("use_kl", [False, True])
def test_kl_is_shown_only_when_computed(tmp_path, capsys, use_kl):
    data = write_rl_rows(tmp_path / "rl.jsonl")
    run = tmp_path / "run"
    run_grpo(
        grpo_config(
            data, run, f"actor.use_kl_loss={use_kl}", "trainer.total_steps=1", "model.lora_rank=4"
        )
    )
    lines = [line for line in capsys.readouterr().err.splitlines() if "[grpo] step 1/1" in line]
    assert len(lines) == 1, lines
    fields = re.findall(r"(\S+)=", lines[0])
    assert fields == ["reward", "len", *(["kl"] if use_kl else []), "tok/s"], lines[0]
    (record,) = [r for r in read_metrics(run) if r.get("step") == 1 and "reward/mean" in r]
    assert ("actor/kl_loss" in record) is use_kl
    assert ("timing/ref_log_prob_s" in record) is use_kl
