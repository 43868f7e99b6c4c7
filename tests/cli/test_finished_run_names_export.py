"""A finished `mfsdp train` names the command that makes Hugging Face weights of its run (the
demo names its next command; a user's own run named its checkpoint only). With --json the
result stays the one JSON object, with no such line."""

from __future__ import annotations

import json
import subprocess
import sys

from mfsdp_ckpt.command_as_run import DEV_SCRIPT
from tests.support.paths import repo_env
from tests.support.sft import TINY_CONFIG, write_chat_jsonl

_MFSDP = "import sys\nsys.argv = ['mfsdp', *sys.argv[1:]]\nfrom cli.main import main\nmain()\n"


def _train(tmp_path, run: str, *extra: str) -> str:
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    args = ["train", "sft", "--config", str(TINY_CONFIG), f"data.train_files=[{data}]"]
    args += [f"trainer.run_dir={run}", "trainer.total_steps=1", "data.val_ratio=0"]
    args += ["trainer.eval_every=0", "trainer.progress_bar=false", *extra]
    done = subprocess.run(
        [sys.executable, "-c", _MFSDP, *args],
        capture_output=True,
        text=True,
        # as a user runs it: `mfsdp` itself, not through ./dev (which names `./dev mfsdp`)
        env={**{k: v for k, v in repo_env().items() if k != DEV_SCRIPT}, "OMP_NUM_THREADS": "1"},
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_result_line_names_export_hf_of_the_run(tmp_path):
    out = _train(tmp_path, "runs/my run")
    assert out.count("\n") == 1, out
    assert out.startswith("sft: step 1, loss ")
    assert out.rstrip().endswith(
        "; checkpoint runs/my run/global_step_1;"
        " next: `mfsdp ckpt export-hf 'runs/my run' --out DIR`"
    )


def test_json_result_has_no_next_line(tmp_path):
    out = _train(tmp_path, "runs/j", "--json")
    result = json.loads(out)
    assert result["checkpoint"] == "runs/j/global_step_1"
    assert "next" not in out
