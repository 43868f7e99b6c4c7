"""What the same weights compute, compared between a --hf-config and the checkpoint's own
config.json: the same model in another transformers version's spelling is no difference."""

from __future__ import annotations

from mfsdp_ckpt.convert.config_behaviour import behaviour_differences


def test_an_old_linear_scaling_config_without_rope_theta_is_its_saved_self():
    """The model dir a run started from (rope_scaling linear, no rope_theta) was refused as
    another model against the config.json transformers 5 saved from it."""
    hub = {"model_type": "qwen2", "rope_scaling": {"type": "linear", "factor": 2.0}}
    saved = {
        "model_type": "qwen2",
        "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
    }
    assert behaviour_differences(hub, saved) == []
    other = {"model_type": "qwen2", "rope_scaling": {"type": "linear", "factor": 4.0}}
    assert behaviour_differences(other, saved) == [
        "rope_parameters={'factor': 4.0, 'rope_theta': 10000.0, 'rope_type': 'linear'}"
        " (own: {'rope_type': 'linear',"
        " 'factor': 2.0, 'rope_theta': 10000.0})"
    ]


def test_gemmas_unread_hidden_act_is_not_compared_its_hidden_activation_is():
    hub = {"model_type": "gemma2", "hidden_act": "gelu", "hidden_activation": "gelu_pytorch_tanh"}
    saved = {
        "model_type": "gemma2",
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh",
    }
    assert behaviour_differences(hub, saved) == []
    relu = {**hub, "hidden_activation": "relu"}
    assert behaviour_differences(relu, saved) == [
        "hidden_activation='relu' (own: 'gelu_pytorch_tanh')"
    ]
