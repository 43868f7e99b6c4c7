"""What Megatron-Bridge's save_checkpoint leaves in a run dir today, beside its iter_N/.

The train state's finalize step replaces `floating_point_operations_so_far` with a float32
tensor before it saves train_state.pt and latest_train_state.pt (state.py's state_dict
gives float64); Energon dataloader state goes to RUN/energon/ (DATALOADER_STATE_SUBDIR)
and global non-persistent saves to RUN/non_persistent/iter_N/.
"""

from __future__ import annotations

import torch

from mfsdp_ckpt.format import checkpoint_resolution, layout
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import bridge_run, train_state


def test_the_run_resolves_through_its_tracker_beside_bridges_other_dirs(tmp_path):
    run = bridge_run(tmp_path, tiny_causal_lm("qwen2", vocab=500), steps=(10, 20), rows=512)
    finalized = train_state(20) | {
        "floating_point_operations_so_far": torch.tensor(3.5e12, dtype=torch.float32)
    }
    torch.save(finalized, run / "latest_train_state.pt")
    (run / "energon").mkdir()
    (run / "energon" / "dataloader_state_20.pt").write_bytes(b"energon state")
    (run / "non_persistent" / "iter_0000025").mkdir(parents=True)
    paths = checkpoint_resolution.resolve_checkpoint(run)
    assert (paths.kind, paths.step, paths.dist_ckpt) == (
        layout.MEGATRON_BRIDGE,
        20,
        run / "iter_0000020",
    )
    code, stdout, err = run_cli("ckpt", "validate", run)
    assert code == 0 and "valid:" in stdout and "newer" not in err, stdout + err
