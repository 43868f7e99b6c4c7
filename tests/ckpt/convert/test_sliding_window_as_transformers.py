"""The layers a sliding window applies to, per family, are what transformers' own config class
makes of config.json, and both readers of them agree: comparing configs
(`attention_windows`) and refusing a windowed mcore conversion (`refuse_attention_window`).
They were worked out twice and disagreed: a Qwen2-MoE config under use_sliding_window with
max_window_layers 0 (transformers windows no layer) was refused, and a config whose
layer_types marks a layer sliding_attention without use_sliding_window (transformers keeps
no window, and its sdpa attention fails on the layer) was refused read from config.json but
converted when transformers had read it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mfsdp_ckpt.convert.config_behaviour import attention_windows, sliding_window
from mfsdp_ckpt.convert.mapping_errors import UnsupportedModelError
from mfsdp_ckpt.convert.name_maps import refuse_attention_window

LAYERS, POSITIONS = 4, 64
# the families whose modeling reads config.layer_types; the others slide config.sliding_window
# on every layer (modeling_mistral, modeling_mixtral, modeling_qwen3_moe)
READ_LAYER_TYPES = ("qwen2", "qwen3", "qwen2_moe")
SLIDING, FULL = "sliding_attention", "full_attention"
MIXED = [FULL, SLIDING, FULL, SLIDING]
SETTINGS = {
    "defaults": {},
    "window_from_layer_1": dict(use_sliding_window=True, sliding_window=16, max_window_layers=1),
    "window_from_layer_0": dict(use_sliding_window=True, sliding_window=16, max_window_layers=0),
    "window_past_the_layers": dict(use_sliding_window=True, sliding_window=16, max_window_layers=9),
    "window_not_used": dict(use_sliding_window=False, sliding_window=16, max_window_layers=0),
    "default_window_used": dict(use_sliding_window=True, max_window_layers=2),
    "null_window_used": dict(use_sliding_window=True, sliding_window=None, max_window_layers=0),
    "null_window_used_below": dict(
        use_sliding_window=True, sliding_window=None, max_window_layers=2
    ),
    "wide_window": dict(use_sliding_window=True, sliding_window=POSITIONS, max_window_layers=0),
    "layer_types_used": dict(use_sliding_window=True, sliding_window=16, layer_types=MIXED),
    "layer_types_alone": dict(sliding_window=16, layer_types=MIXED),
    "layer_types_full": dict(
        use_sliding_window=True, sliding_window=16, layer_types=[FULL] * LAYERS
    ),
    "mistral_window": dict(sliding_window=16),
    "mistral_null_window": dict(sliding_window=None),
}
FAMILIES = ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "mistral", "mixtral", "llama")


def _data(family: str, settings: dict) -> dict:
    return {
        "model_type": family,
        "num_hidden_layers": LAYERS,
        "max_position_embeddings": POSITIONS,
        **settings,
    }


def _transformers_config(data: dict):
    from transformers import AutoConfig

    settings = {key: value for key, value in data.items() if key != "model_type"}
    return AutoConfig.for_model(data["model_type"], **settings)


def _transformers_windows(config) -> tuple[list, list[int]]:
    """Per layer, the window transformers' model of this config slides (None: none), and the
    layers marked sliding_attention where its config keeps no window."""
    window = getattr(config, "sliding_window", None)
    in_force = config.model_type != "llama" and window is not None and window != 0
    if config.model_type not in READ_LAYER_TYPES:
        return [window if in_force else None] * LAYERS, []
    sliding = [i for i, kind in enumerate(config.layer_types) if kind == SLIDING]
    windows = [window if in_force and i in sliding else None for i in range(LAYERS)]
    return windows, ([] if in_force else sliding)


def _refused(config) -> bool:
    try:
        refuse_attention_window(config)
    except UnsupportedModelError:
        return True
    return False


@pytest.mark.parametrize("name", sorted(SETTINGS))
@pytest.mark.parametrize("family", FAMILIES)
def test_windows_are_the_ones_transformers_config_gives(family, name):
    data = _data(family, SETTINGS[name])
    config = _transformers_config(data)
    windows, unwindowed = _transformers_windows(config)

    found = sliding_window(data)
    assert found is not None
    assert [found.size if i in found.layers else None for i in range(LAYERS)] == windows
    assert list(found.unwindowed) == unwindowed

    narrowing = [
        w if w is not None and w < config.max_position_embeddings else None for w in windows
    ]
    assert list(attention_windows(data) or ()) == narrowing
    # what transformers saved reads as what it was given
    assert attention_windows(config.to_dict()) == attention_windows(data)

    refused = any(w is not None for w in narrowing) or bool(unwindowed)
    assert _refused(SimpleNamespace(**data)) is refused  # config.json as read
    assert _refused(config) is refused  # transformers' config of it
