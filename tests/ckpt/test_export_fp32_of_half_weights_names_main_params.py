"""A bf16 Megatron-LM run keeps its model weights in bf16 and the fp32 master copy as the
distributed optimizer's `param` state (`optimizer.state.<param>.param`, as Megatron-LM's
inspector converts a fully_reshardable save). `export-hf --dtype fp32` writes the bf16
weights upcast, what Megatron-LM itself serves.

Was: exit 0 with no word that the save's fp32 main weights were not what was written. Now
one line says so; an export in the stored dtype, or of a run without main weights, says
nothing of them.
"""

from __future__ import annotations

import torch

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run

NOTE = "model weights upcast to float32; the fp32 main weights the optimizer state holds"


def _run(tmp_path, dtype: torch.dtype, main_params: bool):
    model = tiny_causal_lm("llama", vocab=64).to(dtype)

    def optimizer(adam: dict) -> dict:
        for states in adam["state"].values():
            if main_params:
                states["param"] = states["exp_avg"].float()
            states.pop("step")
        return {"state": adam["state"]}

    config = tmp_path / "config"
    model.config.save_pretrained(config)
    return megatron_run(tmp_path, model, megatron_args(model), optimizer=optimizer), config


def _export_notes(tmp_path, run, config, dtype: str) -> str:
    out = tmp_path / f"hf_{dtype}"
    code, stdout, err = run_cli(
        "ckpt", "export-hf", run, "--out", out, "--hf-config", config, "--dtype", dtype
    )
    assert code == 0, stdout + err
    return err


def test_fp32_export_of_bf16_weights_says_the_main_weights_were_not_used(tmp_path):
    run, config = _run(tmp_path, torch.bfloat16, main_params=True)
    err = _export_notes(tmp_path, run, config, "fp32")
    (line,) = [line for line in err.splitlines() if NOTE in line]
    assert "wrote the bfloat16 model weights" in line, line
    assert "optimizer.state.module.module.module." in line and ".param]" in line, line
    assert NOTE not in _export_notes(tmp_path, run, config, "bf16")


def test_no_main_weights_or_fp32_weights_say_nothing_of_them(tmp_path):
    for dtype, main_params in ((torch.bfloat16, False), (torch.float32, True)):
        root = tmp_path / str(dtype)
        root.mkdir()
        run, config = _run(root, dtype, main_params)
        assert NOTE not in _export_notes(root, run, config, "fp32")
