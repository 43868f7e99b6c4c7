"""A run that `trainer.stop_at_step` ended before its last step says so (step N of M, the key,
how to go on), not the finished run's line pointing at an export; --json tells it apart by
`stopped_early` and `total_steps`."""

from __future__ import annotations

import json
import os

from tests.support.fresh_python import mfsdp
from tests.support.paths import EXAMPLES
from tests.support.sft import write_chat_jsonl


def run_sft(tmp_path, *overrides: str):
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    done = mfsdp(
        "train", "sft", "--config", str(EXAMPLES / "sft_tiny_cpu.yaml"),
        f"data.train_files={data}", f"trainer.run_dir={tmp_path / 'run'}",
        "trainer.total_steps=4", "data.global_batch_size=4", "trainer.progress_bar=false",
        "checkpoint.save_every=10", *overrides,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_stopped_run_says_where_it_stopped_and_how_to_go_on(tmp_path):
    first = run_sft(tmp_path, "trainer.stop_at_step=2")
    last = first.stdout.strip()
    checkpoint = tmp_path / "run" / "global_step_2"
    assert last.startswith("sft: stopped at step 2 of 4 by trainer.stop_at_step, loss "), last
    assert f"checkpoint {checkpoint}; to go on from it, run the command again with" in last
    assert "trainer.stop_at_step raised or left out" in last and "export-hf" not in last

    stopped = json.loads(run_sft(tmp_path, "trainer.stop_at_step=3", "--json").stdout)
    assert stopped["stopped_early"] is True and stopped["total_steps"] == 4
    assert stopped["final_step"] == 3 and stopped["resumed_from"] == 2

    result = json.loads(run_sft(tmp_path, "--json").stdout)
    assert result["stopped_early"] is False and result["total_steps"] == 4
    assert result["final_step"] == 4 and result["resumed_from"] == 3
