"""A Megatron record that derives no config is still compared on the numbers it holds.

tests/fixtures/mcore_optim/ holds Megatron-core saves whose `args` record the sizes and
heads (num_attention_heads, kv_channels) but not max_position_embeddings or
group_query_attention, so no config.json is derived from them. A `--hf-config` with
another head layout of the same tensor shapes (2 heads of 32 for 4 of 16) was then not
compared at all: export-hf split the fused QKV by it with exit 0. The heads and head_dim
the record holds are compared now; what it does not hold is not guessed.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.paths import FIXTURES

FIXTURE = FIXTURES / "mcore_optim" / "qwen2"


def _config(target: Path, **changes) -> Path:
    target.mkdir()
    data = json.loads((FIXTURE / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**data, **changes}))
    return target


def test_another_head_layout_is_refused_against_args_that_derive_no_config(tmp_path):
    other = _config(tmp_path / "other", num_attention_heads=2, num_key_value_heads=1, head_dim=32)
    out = tmp_path / "out"
    code, _, err = run_cli("ckpt", "export-hf", FIXTURE / "run", "--hf-config", other, "--out", out)
    line = one_error_line(err)
    assert code == 2 and "num_attention_heads=2 (record: 4), head_dim=32 (record: 16)" in line
    assert "[args] records" in line and not out.exists()
    code, stdout, _ = run_cli("ckpt", "validate", FIXTURE / "run", "--hf-config", other)
    assert code == 1 and "num_attention_heads=2 (record: 4)" in stdout, stdout


def test_the_runs_own_config_is_compared_and_exports_with_no_warning(tmp_path):
    code, stdout, err = run_cli(
        "ckpt", "export-hf", FIXTURE / "run", "--hf-config", FIXTURE, "--out", tmp_path / "hf"
    )
    assert code == 0 and "not checked" not in err, stdout + err
