"""A Megatron record's None where export needs a value is said as what it is, a setting
the record leaves out, with no bound beside it. Was: "num_query_groups=None is not a
positive integer (at most 1099511627776)"."""

from __future__ import annotations

import pytest

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run

# a setting export needs (a count, a number, a flag) -> recorded as None
NEEDED = ["num_query_groups", "hidden_size", "rotary_base", "norm_epsilon", "qk_layernorm"]


@pytest.mark.parametrize("key", NEEDED)
def test_a_none_is_not_recorded_without_a_bound(key, tmp_path):
    model = tiny_causal_lm("llama")
    run = megatron_run(tmp_path, model, megatron_args(model, **{key: None}))
    code, stdout, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "hf")
    line = one_error_line(err)
    assert code == 1 and line.endswith(f"[args]: {key} is not recorded (None)"), stdout + err
    assert not (tmp_path / "hf").exists()
