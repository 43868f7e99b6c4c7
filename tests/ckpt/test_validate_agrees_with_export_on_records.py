"""validate and export-hf give one verdict on a Megatron record, whichever record and config.

Every refusal export-hf's reading of a record can raise (a setting no family exported here
computes, a value of the wrong kind, settings that contradict each other, a model the
derivation cannot lay out), in each record kind (Megatron-LM's `args`, Megatron-Bridge's
run_config.yaml, verl's transformer_config.json), with and without --hf-config: where export
refuses with exit 1, validate fails (exit 1) with export's own line; where export converts,
validate passes. Two differences are the documented ones (docs/interop.md): a --hf-config
that contradicts the record is export's usage error (exit 2) and validate's error (exit 1);
a record that lacks the sizes asks export for --hf-config (exit 2) and leaves validate's
shape check out, with a warning naming what it lacks (exit 0). Was: validate warned and
passed (exit 0) every record export refused without --hf-config, and with one said the
refusal in a line of its own. The verdict (`--json`'s `verdict`) is `unsupported` for a
KIND of model export does not convert stated by a sound record (KINDS_REFUSED) and `invalid`
for every other refusal: a value that is no valid value (text, negative, NaN), one that
contradicts another value or the weights, a bound passed. Was: every refusal but a NaN read
`unsupported`, "intact", a size as text and heads not in their groups included.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from tests.support.cli_errors import error_prefixed_lines
from tests.support.hf_model_files import changed_config_dir
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import (
    bridge_model_section,
    bridge_run,
    megatron_args,
    megatron_run,
    verl_bridge_run,
)

# Megatron-LM argument -> what Megatron-Bridge's provider (run_config.yaml, and verl's
# transformer_config.json, which is that provider as JSON) calls it, where the names differ
_BRIDGE_NAMES = {
    "swiglu": "gated_linear_unit",
    "apply_layernorm_1p": "layernorm_zero_centered_gamma",
    "norm_epsilon": "layernorm_epsilon",
    "use_rope_scaling": "rope_scaling",
    "rotary_seq_len_interpolation_factor": "seq_len_interpolation_factor",
    "num_experts": "num_moe_experts",
}

# case: (family, the record's settings under Megatron-LM's names). Each is a raise site of
# the derivation (`megatron_config`) or of the record's comparison (`record_agreement`,
# `record_values`), beside records export converts.
CASES: dict[str, tuple[str, dict]] = {
    "the run's record": ("llama", {}),
    "LayerNorm": ("llama", {"normalization": "LayerNorm"}),
    "no SwiGLU": ("llama", {"swiglu": False}),
    "learned positions": ("llama", {"position_embedding_type": "learned_absolute"}),
    "partial rotary": ("llama", {"rotary_percent": 0.5}),
    "interleaved rotary": ("llama", {"rotary_interleaved": True}),
    "L2-normalised q/k": ("llama", {"qk_l2_norm": True}),
    "windowed attention": ("llama", {"window_size": [16, 0]}),
    "1p norms": ("llama", {"apply_layernorm_1p": True}),
    "linear biases": ("llama", {"add_bias_linear": True}),
    "both rope scalings": (
        "llama",
        {"use_rope_scaling": True, "rotary_seq_len_interpolation_factor": 2.0},
    ),
    "q/k/v bias with q/k norm": ("llama", {"add_qkv_bias": True, "qk_layernorm": True}),
    "a flag as text": ("llama", {"add_qkv_bias": "false"}),
    "a size as text": ("llama", {"num_layers": "2"}),
    "NaN norm epsilon": ("llama", {"norm_epsilon": math.nan}),
    "heads not in groups": ("llama", {"num_query_groups": 3}),
    "no vocabulary": ("llama", {"padded_vocab_size": None, "vocab_size": None}),
    "sigmoid router": ("qwen3_moe", {"moe_router_score_function": "sigmoid"}),
    "dense layers among MoE": ("qwen3_moe", {"moe_layer_freq": [0, 1]}),
    "top-k over experts": ("qwen3_moe", {"moe_router_topk": 9}),
    "a negative expert count": ("qwen3_moe", {"num_experts": -1}),
    "pre-softmax Mixtral": ("mixtral", {"moe_router_pre_softmax": True}),
    "layers past the tool's bound": ("llama", {"num_layers": 10**6}),
}
# Records of another model than the weights: export refuses the plan (exit 1) naming a
# stored tensor or the derived config.json; validate's line names what it checked against
# and says export's reason.
FIT_CASES: dict[str, tuple[str, dict]] = {
    "a layer more than stored": ("llama", {"num_layers": 3}),
    "another hidden size": ("llama", {"hidden_size": 256, "kv_channels": 32}),
    "more rows than stored": ("llama", {"padded_vocab_size": 1000}),
    # fewer rows than vocab_size where the record states exactly the rows: exported as them
    "a vocabulary past the padded rows": ("llama", {"vocab_size": 600}),
}
KINDS = ("args", "run_config.yaml", "transformer_config.json")
# Kinds of model export does not convert, each stated in values of its kind ("LayerNorm",
# False, 0.5, [0, 1]): UNSUPPORTED (`RefusedKind`). The other refusals of CASES are damage,
# INVALID: "a flag as text" and "a size as text" (text for a flag or a count), "NaN norm
# epsilon", "heads not in groups" and "top-k over experts" (values that contradict each
# other), "a negative expert count" (no count), "layers past the tool's bound" (a bound
# passed, and far more layers than stored).
KINDS_REFUSED = {
    "LayerNorm",
    "no SwiGLU",
    "learned positions",
    "partial rotary",
    "interleaved rotary",
    "L2-normalised q/k",
    "windowed attention",
    "1p norms",
    "linear biases",
    "both rope scalings",
    "q/k/v bias with q/k norm",
    "sigmoid router",
    "dense layers among MoE",
    "pre-softmax Mixtral",
}


def _bridge_named(settings: dict) -> dict:
    """`settings` under the provider's names; None removes the entry (a record lacking it)."""
    named = {_BRIDGE_NAMES.get(k, k): v for k, v in settings.items()}
    return {k: v for k, v in named.items() if k not in ("padded_vocab_size",)}


def _checkpoint(kind: str, model, settings: dict, root: Path) -> Path:
    """A run of `kind` whose record holds `settings` (under Megatron-LM's names)."""
    if kind == "args":
        args = megatron_args(model, **settings)
        for key in [k for k, v in settings.items() if v is None and k != "vocab_size"]:
            delattr(args, key)  # a Namespace without the setting
        return megatron_run(root, model, args)
    named = _bridge_named(settings)
    if kind == "transformer_config.json":
        return verl_bridge_run(root, model, **named)

    def section(model) -> dict:
        fields = {**bridge_model_section(model), **named}
        return {k: v for k, v in fields.items() if not (k in named and v is None)}

    return bridge_run(root, model, steps=(10,), model_section=section)


def _verdicts(run: Path, out: Path, *given) -> tuple[tuple[int, str], tuple[int, str, str]]:
    """(export-hf's exit code and stderr, validate's exit code, stdout and stderr)."""
    code, _, err = run_cli("ckpt", "export-hf", run, "--out", out, *given)
    export = (code, err)
    code, stdout, err = run_cli("ckpt", "validate", run, "--json", *given)
    return export, (code, stdout, err)


def _assert_agree(
    export: tuple[int, str], validate: tuple[int, str, str], given: bool, fit: bool, kind: bool
) -> None:
    """As the module says; and the verdict: `unsupported` where export refuses a kind of
    model (`kind`) the record states, `invalid` where it refuses a config that is not the
    record's model, weights that do not fit the record, or a damaged record."""
    code, err = export
    checked, stdout, verr = validate
    report = json.loads(stdout)
    errors = [f"error: {f['where']}: {f['message']}" for f in report["findings"]]
    errors = [line for f, line in zip(report["findings"], errors) if f["severity"] == "error"]
    said = f"export exit {code}: {err}\nvalidate exit {checked}: {stdout}{verr}"
    if code == 0:
        assert checked == 0 and not errors and report["verdict"] == "valid", said
    elif code == 1 and not fit:  # export's refusal is validate's error, in the same line
        (line,) = error_prefixed_lines(err)
        assert checked == 1 and line in errors, said
        record_rule = "not the model" not in line and kind
        assert report["verdict"] == ("unsupported" if record_rule else "invalid"), said
    elif code == 1:  # the same reason, under the config validate names
        (line,) = error_prefixed_lines(err)
        reason = line.split(": ", 2)[-1]
        assert checked == 1 and any(reason in e for e in errors), said
        assert report["verdict"] == "invalid", said
    elif given:  # a --hf-config the record contradicts: usage there, an error here
        assert checked == 1 and errors and report["verdict"] == "invalid", said
    else:  # the record lacks what a config needs: export asks for --hf-config
        warnings = [f["message"] for f in report["findings"] if f["severity"] == "warning"]
        assert "lacks" in err and checked == 0 and not errors, said
        assert any("weight shapes not checked" in w and "lacks" in w for w in warnings), said


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(CASES) + list(FIT_CASES))
def test_validate_gives_exports_verdict_on_the_record(kind, case, tmp_path):
    fit = case in FIT_CASES
    family, settings = FIT_CASES[case] if fit else CASES[case]
    model = tiny_causal_lm(family)
    run = _checkpoint(kind, model, settings, tmp_path)
    given = changed_config_dir(model, tmp_path / "given")
    for hf_config in ((), ("--hf-config", given)):
        export, validate = _verdicts(run, tmp_path / "hf", *hf_config)
        _assert_agree(export, validate, bool(hf_config), fit, case in KINDS_REFUSED)
        assert export[0] == 0 or not (tmp_path / "hf").exists()
        shutil.rmtree(tmp_path / "hf", ignore_errors=True)


def test_a_refused_record_fails_validate_in_exports_line(tmp_path):
    """The class in one line: a LayerNorm record was `warning: ... no Hugging Face config`
    and `valid:` (exit 0) where export-hf said `error: ... normalization='LayerNorm'
    cannot be exported` (exit 1); under --hf-config validate said it as the config's
    contradiction, not as the record's setting. Its verdict is UNSUPPORTED, not INVALID:
    the checkpoint is intact (tests/ckpt/test_validate_unsupported_verdict.py)."""
    model = tiny_causal_lm("llama")
    run = megatron_run(tmp_path, model, megatron_args(model, normalization="LayerNorm"))
    where = f"{run / 'iter_0000100'} [args]"
    words = "normalization='LayerNorm' cannot be exported"
    code, stdout, _ = run_cli("ckpt", "validate", run)
    assert code == 1 and f"error: {where}: {words} (Llama" in stdout, stdout
    assert stdout.splitlines()[-1].startswith("UNSUPPORTED:"), stdout
    given = changed_config_dir(model, tmp_path / "given")
    code, stdout, _ = run_cli("ckpt", "validate", run, "--hf-config", given)
    assert code == 1 and f"error: {where}: {words}" in stdout, stdout
    assert f"(nor does --hf-config {given / 'config.json'})" in stdout, stdout
