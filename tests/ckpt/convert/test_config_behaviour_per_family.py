"""Per family, the config.json settings that change what the same weights compute are
compared between a --hf-config and the checkpoint's own config.json: attention windows
(sliding_window, use_sliding_window, max_window_layers, layer_types, as the family reads
them) and MoE top-k renormalisation (norm_topk_prob, a left-out one at its default). They
were not: a Mistral checkpoint exported under a config without its window computed logits
off by 0.24, a Qwen3-MoE one under norm_topk_prob false off by 0.065, exit 0."""

from __future__ import annotations

import pytest

from mfsdp_ckpt.convert.config_behaviour import attention_windows, behaviour_differences
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import one_error_line, run_cli

LAYERS = {"num_hidden_layers": 4, "max_position_embeddings": 256}


def _config(family: str, **keys) -> dict:
    return {"model_type": family, **LAYERS, **keys}


@pytest.mark.parametrize(
    ("family", "own", "given", "named"),
    [
        ("mistral", {"sliding_window": 16}, {"sliding_window": None}, "16 on every layer"),
        # left out: MistralConfig's 4096, which narrows nothing at 256 positions
        ("mistral", {"sliding_window": 16}, {}, "=none (own: 16 on every layer)"),
        ("mixtral", {"sliding_window": None}, {"sliding_window": 32}, "32 on every layer"),
        (
            "qwen2",
            {"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 2},
            {"use_sliding_window": False, "sliding_window": 16, "max_window_layers": 2},
            "{2: 16, 3: 16}",
        ),
        (
            "qwen3",
            {"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 2},
            {"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 1},
            "{1: 16, 2: 16, 3: 16}",
        ),
        (
            "qwen2",
            {"layer_types": ["full_attention"] * 4},
            {
                "use_sliding_window": True,
                "sliding_window": 16,
                "layer_types": ["sliding_attention"] * 4,
            },
            "16 on every layer",
        ),
        (
            "qwen3_moe",
            {"use_sliding_window": False},
            {"use_sliding_window": True, "sliding_window": 16},
            "16 on every layer",
        ),
        (
            "qwen2_moe",
            {"use_sliding_window": False},
            {"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 4},
            "{0: 16, 2: 16}",
        ),
    ],
)
def test_another_attention_window_is_a_difference(family, own, given, named):
    found = behaviour_differences(_config(family, **given), _config(family, **own))
    assert len(found) == 1 and found[0].startswith("attention windows=") and named in found[0]


@pytest.mark.parametrize(
    ("family", "one", "other"),
    [
        # a window no shorter than the positions narrows nothing
        ("mistral", {"sliding_window": None}, {"sliding_window": 256}),
        # Qwen's window keys say nothing while use_sliding_window is false (a hub Qwen2.5
        # config against the one transformers 5 saved from it)
        (
            "qwen2",
            {"use_sliding_window": False, "sliding_window": 131072, "max_window_layers": 21},
            {
                "sliding_window": None,
                "max_window_layers": 28,
                "layer_types": ["full_attention"] * 4,
            },
        ),
        ("qwen2_moe", {"use_sliding_window": False, "sliding_window": 0}, {}),
        ("llama", {}, {"sliding_window": 16}),  # Llama reads no window
    ],
)
def test_the_same_windows_in_another_spelling_are_no_difference(family, one, other):
    assert behaviour_differences(_config(family, **one), _config(family, **other)) == []


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen2_moe"])
def test_norm_topk_prob_is_compared_a_left_out_one_at_its_default(family):
    renormalising = _config(family, norm_topk_prob=True)
    assert behaviour_differences(_config(family, norm_topk_prob=False), renormalising) == [
        "norm_topk_prob=False (own: True)"
    ]
    assert behaviour_differences(_config(family), renormalising) == [
        "norm_topk_prob=False (own: True)"
    ]
    assert behaviour_differences(_config(family), _config(family, norm_topk_prob=False)) == []


def test_a_layer_count_that_is_not_one_leaves_windows_unknown():
    assert attention_windows(_config("qwen2", num_hidden_layers=10**12)) is None
    assert attention_windows(_config("qwen2", num_hidden_layers="4")) is None


def _imported(family: str, tmp_path, **config):
    """An HF-layout import of a tiny `family` model (its config.json kept beside it)."""
    model = tiny_causal_lm(family, **config)
    model.save_pretrained(tmp_path / "model")
    code, stdout, err = run_cli(
        "ckpt", "import-hf", tmp_path / "model", "--out", tmp_path / "ckpt", "--layout", "hf"
    )
    assert code == 0, stdout + err
    return model, tmp_path / "ckpt"


@pytest.mark.parametrize(
    ("family", "config", "changes", "named"),
    [
        (
            "llama",
            {"model_type": "mistral", "sliding_window": 16, "head_dim": 32},
            {"sliding_window": None},
            "attention windows=none (own: 16 on every layer)",
        ),
        ("qwen3_moe", {}, {"norm_topk_prob": False}, "norm_topk_prob=False (own: True)"),
    ],
)
def test_export_and_validate_refuse_a_config_computing_otherwise(
    family, config, changes, named, tmp_path
):
    from tests.support.hf_model_files import changed_config_dir

    model, ckpt = _imported(family, tmp_path, **config)
    given = changed_config_dir(model, tmp_path / "given", **changes)
    out = tmp_path / "hf"
    code, _, err = run_cli("ckpt", "export-hf", ckpt, "--out", out, "--hf-config", given)
    line = one_error_line(err)
    assert code == 2 and named in line and "checkpoint's own" in line, err
    assert not out.exists()
    code, stdout, err = run_cli("ckpt", "validate", ckpt, "--hf-config", given)
    assert code == 1 and named in stdout, stdout + err
