"""A symlink in dist_ckpt/ to a file beside it in the same step is refused, naming what it
leaves: dist_ckpt/, the directory whose files DCP reads, not "the checkpoint", which the
README's layout calls the whole `global_step_<N>/` that the link stays in."""

from __future__ import annotations

import shutil

from tests.support.interop_layouts import run_cli
from tests.support.paths import FIXTURES

RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"  # mfsdp's layout: tracker and global_step_2


def test_a_link_to_a_file_beside_dist_ckpt_names_dist_ckpt(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    step = run / "global_step_2"
    shard = step / "dist_ckpt" / "__0_0.distcp"
    shutil.move(shard, step / "real0")
    shard.symlink_to("../real0")
    for given in (run, step, step / "dist_ckpt"):
        code, out, err = run_cli("ckpt", "validate", given)
        errors = [line for line in out.splitlines() if line.startswith("error:")]
        assert code == 1 and out.splitlines()[-1].startswith("INVALID:"), out + err
        assert errors == [
            f"error: {shard}: symlink points outside the checkpoint's dist_ckpt/"
            f" ({(step / 'real0').resolve()})"
        ], out
