"""Megatron-core's rope scaling, derived from the record into config.json's `rope_scaling`.

Megatron-core runs two scalings (megatron/core/models/common/embeddings/
rotary_pos_embedding.py, RotaryEmbedding): Llama 3.1's (`--use-rope-scaling`
`--rope-scaling-factor`; Bridge's `rope_scaling`), whose `_apply_scaling` fixes
low_freq_factor 1, high_freq_factor 4 and original_max_position_embeddings 8192, and linear
position interpolation (`--rotary-seq-len-interpolation-factor`; Bridge's
`seq_len_interpolation_factor`), which divides the positions (`get_freqs_non_repeated`).
Was: export refused both ("... is not derived; pass --hf-config") though the record fixes
them. Now export writes transformers' llama3 / linear scaling, and the export computes the
transformers model built with it; the formulas are checked against each other below.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from tests.support.export import logits_of
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import (
    bridge_run,
    megatron_args,
    megatron_run,
)

LLAMA3 = {"low_freq_factor": 1.0, "high_freq_factor": 4.0}
LLAMA3_POSITIONS = {"original_max_position_embeddings": 8192}


def _llama3(factor: float) -> dict:
    return {"rope_type": "llama3", "factor": factor, **LLAMA3, **LLAMA3_POSITIONS}


# case -> (the model's rope scaling, what the record holds, config.json's rope_scaling)
CASES = {
    "args llama3": (_llama3(32.0), {"use_rope_scaling": True, "rope_scaling_factor": 32.0}),
    "args llama3 default factor": (_llama3(8.0), {"use_rope_scaling": True}),
    "args linear": (
        {"rope_type": "linear", "factor": 4.0},
        {"rotary_seq_len_interpolation_factor": 4.0},
    ),
    "bridge llama3": (_llama3(32.0), {"rope_scaling": True, "rope_scaling_factor": 32.0}),
    "bridge linear": (
        {"rope_type": "linear", "factor": 4.0},
        {"seq_len_interpolation_factor": 4.0},
    ),
}
BASE = 500000.0  # Llama 3.1's: its low frequencies are the ones llama3 scaling divides


def _run(tmp_path, case: str):
    scaling, record = CASES[case]
    model = tiny_causal_lm("llama", vocab=512, rope_parameters={**scaling, "rope_theta": BASE})
    if case.startswith("args"):
        return model, megatron_run(tmp_path, model, megatron_args(model, **record))
    run = bridge_run(tmp_path, model, steps=(10,))
    run_config = run / "iter_0000010" / "run_config.yaml"
    data = yaml.safe_load(run_config.read_text())
    data["model"].update(record)
    run_config.write_text(yaml.safe_dump(data))
    return model, run


@pytest.mark.parametrize("case", list(CASES))
def test_recorded_rope_scaling_exports_as_the_model_built_with_it(case, tmp_path):
    model, run = _run(tmp_path, case)
    out = tmp_path / "hf"
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", out, "--dtype", "fp32")
    assert code == 0, stdout + err
    config = json.loads((out / "config.json").read_text())
    assert config["rope_scaling"] == CASES[case][0] and config["rope_theta"] == BASE, config
    # positions far apart, where the scaling moves the angles most
    ids = torch.randint(0, 512, (1, 250), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    torch.testing.assert_close(logits_of(out, ids), expected, rtol=0, atol=1e-5)
    # the scaling shows in these logits: without it the same weights compute others
    plain = tiny_causal_lm("llama", vocab=512, rope_parameters={"rope_theta": BASE})
    plain.load_state_dict(model.state_dict())
    with torch.no_grad():
        unscaled = plain(input_ids=ids).logits
    assert (unscaled - expected).abs().max() > 1e-4  # ten times the tolerance above


def test_llama3_with_interpolation_is_refused_naming_both(tmp_path):
    model = tiny_causal_lm("llama")
    args = megatron_args(model, use_rope_scaling=True, rotary_seq_len_interpolation_factor=2.0)
    run = megatron_run(tmp_path, model, args)
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and "Llama 3.1 rope scaling with" in line, stdout + err
    assert "rotary_seq_len_interpolation_factor=2.0" in line, line


@pytest.mark.parametrize("factor", [float("nan"), -2.0, "8"])
def test_a_scaling_factor_that_is_no_positive_number_is_refused(factor, tmp_path):
    model = tiny_causal_lm("llama")
    args = megatron_args(model, use_rope_scaling=True, rope_scaling_factor=factor)
    run = megatron_run(tmp_path, model, args)
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    assert code == 1 and "rope_scaling_factor=" in one_error_line(err), stdout + err
    assert not (tmp_path / "hf").exists()


def _megatron_llama3_inv_freq(freqs: torch.Tensor, factor: float) -> torch.Tensor:
    """RotaryEmbedding._apply_scaling as megatron/core/models/common/embeddings/
    rotary_pos_embedding.py computes it, with its fixed low_freq_factor 1,
    high_freq_factor 4 and original_max_position_embeddings 8192."""
    low_freq_factor, high_freq_factor, old_context_len = 1, 4, 8192
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / freqs
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, freqs / factor, freqs)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (
        high_freq_factor - low_freq_factor
    )
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + (
        smooth_factor * inv_freq_llama
    )
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def _megatron_inv_freq(base: float, dim: int) -> torch.Tensor:
    """RotaryEmbedding.__init__'s unscaled frequencies (rotary_percent 1)."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))


def _transformers_inv_freq(rope: dict, dim: int) -> torch.Tensor:
    config = LlamaConfig(hidden_size=dim * 4, num_attention_heads=4, head_dim=dim)
    config.rope_parameters = rope
    return ROPE_INIT_FUNCTIONS[rope["rope_type"]](config, "cpu")[0]


@pytest.mark.parametrize("factor", [8.0, 32.0])
@pytest.mark.parametrize("base", [10000.0, 500000.0])
@pytest.mark.parametrize("dim", [64, 128])
def test_megatron_llama3_frequencies_are_transformers_llama3(factor, base, dim):
    megatron = _megatron_llama3_inv_freq(_megatron_inv_freq(base, dim), factor)
    derived = {**_llama3(factor), "rope_theta": base}
    theirs = _transformers_inv_freq(derived, dim)
    torch.testing.assert_close(theirs, megatron, rtol=1e-6, atol=0)
    # each band (kept, divided, smoothed) is present at Llama 3.1's numbers, so each is compared
    unscaled = _megatron_inv_freq(base, dim)
    if base == 500000.0 and dim == 128:
        ratio = unscaled / megatron
        assert (ratio == 1).any() and (ratio == factor).any()
        assert ((ratio > 1) & (ratio < factor)).any()


def test_megatron_position_interpolation_is_transformers_linear():
    """Megatron divides the positions by the factor; transformers' linear the frequencies:
    the same angles."""
    base, dim, factor = 10000.0, 64, 4.0
    positions = torch.arange(4096, dtype=torch.float32)
    megatron = torch.outer(positions * (1 / factor), _megatron_inv_freq(base, dim))
    theirs = _transformers_inv_freq(
        {"rope_type": "linear", "factor": factor, "rope_theta": base}, dim
    )
    torch.testing.assert_close(torch.outer(positions, theirs), megatron, rtol=1e-5, atol=1e-4)
