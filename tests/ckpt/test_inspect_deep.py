"""`inspect --deep` hashes a LoRA checkpoint's base model, as its help says; it reads no
tensor of the checkpoint itself. On a checkpoint that is not LoRA it says that nothing more
was read and names the command that does read everything (`validate --deep`), rather than
leave a truncated file looking checked."""

from __future__ import annotations

import json
import shutil

from tests.support.interop_layouts import largest_shard, run_cli
from tests.support.paths import FIXTURES

NOTHING_READ = "this checkpoint is not LoRA, so nothing more was read"


def test_inspect_deep_on_a_full_checkpoint_says_it_read_nothing_more(tmp_path):
    """Was: exit 0 and silence on a truncated .distcp, as if --deep had checked it."""
    run = shutil.copytree(FIXTURES / "megatron_fsdp_qwen2" / "run", tmp_path / "run")
    shard = largest_shard(run / "global_step_2" / "dist_ckpt")
    with open(shard, "r+b") as handle:
        handle.truncate(1000)
    for flags in ((), ("--json",)):
        code, out, err = run_cli("ckpt", "inspect", run, "--deep", *flags)
        assert code == 0, err  # inspect describes; the help promises no read of the tensors
        notes = [line for line in err.splitlines() if NOTHING_READ in line]
        assert len(notes) == 1 and "validate --deep" in notes[0], err
        if flags:
            assert json.loads(out)["lora"] is None
    code, _out, err = run_cli("ckpt", "inspect", run)
    assert code == 0 and NOTHING_READ not in err
    code, out, _err = run_cli("ckpt", "validate", run, "--deep")  # what does read it
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert code == 1 and str(shard) in errors[0], out
