"""The `ckpt` commands that load torch choose its CPU threads as `mfsdp train` does
(trainer/threads.py): they ran torch's default, a spinning thread per core, and
`validate --deep` took 2-3x as long on a busy 2-core machine as with one thread."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.hf_model_files import saved_hf_model
from tests.support.paths import FIXTURES, REPO
from trainer.threads import CHOSEN_MARKER

# mfsdp's main, then at exit what torch runs, where the command loaded it
THREADS_AT_EXIT = """
import atexit, sys
sys.path.insert(0, {repo!r})
def said():
    torch = sys.modules.get("torch")
    print("torch threads:", torch.get_num_threads() if torch else None, file=sys.stderr)
atexit.register(said)
sys.argv = ["mfsdp", *sys.argv[1:]]
from cli.main import main
main()
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny HF model and the checkpoint imported from it."""
    from mfsdp_ckpt.convert.import_hf import import_hf

    root = tmp_path_factory.mktemp("threads")
    hf_dir = saved_hf_model(root, "qwen2", tied=True)
    import_hf(str(hf_dir), str(root / "run"), layout_name="hf")
    return root, hf_dir


def _mfsdp_at_info(*args: str) -> subprocess.CompletedProcess:
    """`mfsdp -v ARGS` in a fresh interpreter, with no thread setting of the user's."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", CHOSEN_MARKER)
    }
    return subprocess.run(
        [sys.executable, "-c", THREADS_AT_EXIT.format(repo=str(REPO)), "-v", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )


@pytest.mark.parametrize(
    "command",
    [
        ["ckpt", "validate", "--deep", "{root}/run"],
        ["ckpt", "export-hf", "{root}/run", "--out", "{root}/hf_{n}", "--verify"],
        ["ckpt", "import-hf", "{hf}", "--out", "{root}/run_{n}", "--layout", "hf"],
    ],
    ids=["validate-deep", "export-hf-verify", "import-hf"],
)
def test_a_ckpt_command_that_loads_torch_runs_the_threads_train_would(checkpoint, command):
    root, hf_dir = checkpoint
    places = {"root": root, "hf": hf_dir, "mcore": FIXTURES / "mcore" / "qwen2" / "dist_ckpt"}
    args = [part.format(n=len(list(root.iterdir())), **places) for part in command]
    done = _mfsdp_at_info(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    chosen = re.findall(r"(\d+) CPU thread\(s\) per process", done.stderr)
    ran = re.search(r"torch threads: (\d+)", done.stderr)
    assert ran, f"{args} did not load torch: {done.stderr[-2000:]}"
    assert chosen == [ran.group(1)], done.stderr[-2000:]


@pytest.mark.parametrize(
    "command",
    [["ckpt", "validate", "{root}/run"], ["ckpt", "inspect", "{mcore}"]],
    ids=["validate", "inspect"],
)
def test_a_check_that_reads_no_tensor_loads_no_torch_and_chooses_no_threads(checkpoint, command):
    """The choice samples the CPUs for 0.1 s: a check that reads no tensor skips it. inspect
    of Megatron's plain-data records (the mcore fixture's) decodes them without torch."""
    root, _ = checkpoint
    places = {"root": root, "mcore": FIXTURES / "mcore" / "qwen2" / "dist_ckpt"}
    done = _mfsdp_at_info(*[part.format(**places) for part in command])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "torch threads: None" in done.stderr
    assert "CPU thread(s) per process" not in done.stderr, done.stderr[-2000:]
