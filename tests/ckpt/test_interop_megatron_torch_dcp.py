"""Megatron-LM's `--ckpt-format torch_dcp`: plain torch DCP without Megatron-FSDP.

checkpointing.py saves it through torch.distributed.checkpoint.save as it does
fsdp_dtensor, with the same top-level entries (`args`, `checkpoint_version`, `iteration`,
`model`, ...), but skips preprocess_fsdp_dtensor_state_dict: SwiGLU's linear_fc1 stays
fused ([gate; up]) and Transformer Engine's `_extra_state` entries stay in the model
entry (as bytes). The iteration dir has no metadata.json, so it reads as Megatron-LM's.
"""

from __future__ import annotations

import io

from mfsdp_ckpt.format import checkpoint_resolution, layout
from tests.support.hf_to_mcore import tiny_causal_lm, to_mcore
from tests.support.interop_layouts import assert_exports_to_source, run_cli
from tests.support.megatron_checkpoints import megatron_args, save_dcp


def test_a_torch_dcp_iteration_exports_to_the_source_logits(tmp_path):
    model = tiny_causal_lm("qwen2")
    weights = {f"module.{k}": v for k, v in to_mcore(model, norms="te", fc1="fused").items()}
    linear = [k for k in weights if ".linear_" in k and k.endswith(".weight")]
    extra = {k.removesuffix("weight") + "_extra_state" for k in linear}
    weights.update({k: io.BytesIO(b"transformer-engine fp8 meta") for k in extra})
    args = megatron_args(model, ckpt_format="torch_dcp", use_megatron_fsdp=False)
    run = tmp_path / "megatron"
    state = {"args": args, "checkpoint_version": 3.0, "iteration": 100, "model": weights}
    save_dcp(state, run / "iter_0000100")
    (run / "latest_checkpointed_iteration.txt").write_text("100")
    assert checkpoint_resolution.resolve_checkpoint(run).kind == layout.MEGATRON_LM
    code, stdout, err = run_cli("ckpt", "validate", run, "--deep")
    assert code == 0 and "warning" not in stdout, stdout + err
    assert_exports_to_source(model, run, tmp_path / "hf")
