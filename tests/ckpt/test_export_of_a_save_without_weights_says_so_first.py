"""A checkpoint holding no model weights (verl's `save_contents=[extra]` or `[optimizer,
extra]`, whose Hugging Face config verl writes only with the model) is refused by
export-hf for that, exit 1, before any config.json is asked for.

Was: "huggingface: no config.json; pass --hf-config" (exit 2) first; given --hf-config,
then "checkpoint holds no model weights" (exit 1): the flag asked for was no use.
"""

from __future__ import annotations

import shutil
import warnings

import pytest

from tests.support.interop_layouts import BUILDERS, dcp_of, one_error_line, run_cli


def _without_weights(made_optim, root, kept: tuple[str, ...]):
    """A verl RL v1 run whose step keeps only the `kept` entries of its state, its
    huggingface/ empty (as verl leaves it without the model)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    laid = BUILDERS["verl-rl-v1"](made_optim, root)
    whole = root / "whole.pt"
    with warnings.catch_warnings():  # DCP warns that it runs without a process group
        warnings.simplefilter("ignore")
        dcp_to_torch_save(dcp_of(made_optim), whole)
        state = torch.load(whole, weights_only=False)  # the test fixture's own file
        shutil.rmtree(laid.dist_ckpt)
        dcp.save(
            {k: v for k, v in state.items() if k in kept},
            checkpoint_id=str(laid.dist_ckpt),
            no_dist=True,
        )
    hf = laid.dist_ckpt.parent / "huggingface"
    shutil.rmtree(hf)
    hf.mkdir()
    return laid


@pytest.mark.parametrize("kept", [("opt_param_scheduler",), ("optimizer", "opt_param_scheduler")])
def test_no_weights_is_said_before_a_config_is_asked_for(made_optim, tmp_path, kept):
    laid = _without_weights(made_optim, tmp_path / "run", kept)
    code, out, err = run_cli("ckpt", "export-hf", laid.run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and "checkpoint holds no model weights" in line, out + err
    assert "--hf-config" not in line and not (tmp_path / "hf").exists()


def test_weights_without_a_config_still_ask_for_one(made_optim, tmp_path):
    laid = _without_weights(made_optim, tmp_path / "run", ("model", "optimizer"))
    code, out, err = run_cli("ckpt", "export-hf", laid.run, "--out", tmp_path / "hf")
    assert code == 2 and "pass --hf-config" in one_error_line(err), out + err
