"""validate --hf-config names a model saved in virtual-pipeline chunks as export does.

Chunks (`model0`, `model1`) each number their layers from 0, so their keys collide once the
entry is stripped: validate said "two stored keys name one weight", as if the save were
damaged, where export-hf names the chunks. Megatron-LM's iter_N and a bare DCP alike.
"""

from __future__ import annotations

import warnings

import pytest
import torch.distributed.checkpoint as dcp

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import STEP, mcore_weights, megatron_args, save_dcp

_CHUNKS = "model entries model0, model1: a model saved in virtual-pipeline"


def _chunks(weights: dict) -> dict:
    first = {k: v for k, v in weights.items() if ".layers.1." not in k}
    second = {
        k.replace(".layers.1.", ".layers.0."): v for k, v in weights.items() if ".layers.1." in k
    }
    return {"model0": first, "model1": second}


@pytest.mark.parametrize("kind", ["megatron-lm", "bare dcp"])
def test_chunks_are_named_against_a_config(kind, tmp_path):
    model = tiny_causal_lm("qwen2")
    hf_config = tmp_path / "hfc"
    model.config.save_pretrained(hf_config)
    if kind == "megatron-lm":
        ckpt = tmp_path / "megatron"
        record = {"args": megatron_args(model), "checkpoint_version": 3.0, "iteration": STEP}
        save_dcp({**record, **_chunks(mcore_weights(model))}, ckpt / f"iter_{STEP:07d}")
        (ckpt / "latest_checkpointed_iteration.txt").write_text(str(STEP))
    else:
        ckpt = tmp_path / "bare" / "dist_ckpt"
        hf = {k: v.detach().clone() for k, v in model.state_dict().items()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
            dcp.save(_chunks(hf), checkpoint_id=str(ckpt), no_dist=True)
    code, stdout, _err = run_cli("ckpt", "validate", ckpt, "--hf-config", hf_config)
    assert code == 1 and _CHUNKS in stdout, stdout
    assert "both name the weight" not in stdout, stdout
    code, _out, err = run_cli(
        "ckpt", "export-hf", ckpt, "--hf-config", hf_config, "--out", tmp_path / "o"
    )
    assert code == 1 and _CHUNKS in one_error_line(err)
