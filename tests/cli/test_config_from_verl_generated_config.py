"""`mfsdp config from-verl` on verl's own _generated_ppo_trainer.yaml exited 2 ("mfsdp trains
GRPO only") on its default `adv_estimator: gae`, printing nothing of the rest; it prints the
config, with the one line to change at the top, and exits 1."""

from __future__ import annotations

from tests.support.fresh_python import mfsdp
from tests.support.paths import REPO

GENERATED = REPO / "tests" / "fixtures" / "verl_configs" / "_generated_ppo_trainer.yaml"


def test_verls_generated_config_prints_with_the_estimator_named():
    done = mfsdp("config", "from-verl", str(GENERATED))
    assert done.returncode == 1, done.stderr
    assert (
        "# NOT carried over: algorithm.adv_estimator=gae: mfsdp trains GRPO only; set"
        " algorithm.adv_estimator=grpo" in done.stdout
    )
    assert "\nactor:\n  ppo_mini_batch_size: 256\n" in done.stdout
    assert done.stderr == "error: from-verl: 2 key(s) not carried over (listed at the top)\n"
