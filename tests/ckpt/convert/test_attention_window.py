"""Qwen2/Qwen3 models whose layers use a sliding window are refused by mcore conversions (the
Megatron-core layers run full attention), as transformers decides the windowed layers:
from max_window_layers on under use_sliding_window, or as config.json's layer_types says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from cli.main import app
from tests.support.cli_errors import one_error
from tests.support.hf_model_files import TINY as IMPORT_TINY

TINY = {key: value for key, value in IMPORT_TINY.items() if key != "dtype"}


def _qwen(root: Path, family: str, **config) -> Path:
    """A random tiny Qwen2/Qwen3 model saved by transformers itself."""
    import transformers

    name = "Qwen2" if family == "qwen2" else "Qwen3"
    settings = {**TINY, **config}
    torch.manual_seed(0)
    model_class = getattr(transformers, f"{name}ForCausalLM")
    model = model_class(getattr(transformers, f"{name}Config")(**settings))
    out = root / family
    model.save_pretrained(out)
    return out


def _import(source: Path, out: Path, layout: str = "mcore"):
    return CliRunner().invoke(
        app, ["ckpt", "import-hf", str(source), "--out", str(out), "--layout", layout]
    )


@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_windowed_layers_are_refused_naming_them(family, tmp_path):
    source = _qwen(
        tmp_path, family, use_sliding_window=True, sliding_window=16, max_window_layers=1
    )
    result = _import(source, tmp_path / "ckpt")
    assert result.exit_code == 1, result.output
    one_error(result.output, "sliding_window=16", "on layer 1 (", "full attention")
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.parametrize(
    "settings",
    [
        dict(use_sliding_window=False, sliding_window=16, max_window_layers=1),
        dict(use_sliding_window=True, sliding_window=16, max_window_layers=2),  # no layer
        dict(use_sliding_window=True, sliding_window=64, max_window_layers=0),  # wide window
    ],
)
def test_full_attention_configs_convert(settings, tmp_path):
    source = _qwen(tmp_path, "qwen2", **settings)
    result = _import(source, tmp_path / "ckpt")
    assert result.exit_code == 0, result.output


def test_layer_types_in_config_json_decide(tmp_path):
    source = _qwen(tmp_path, "qwen2")
    config = json.loads((source / "config.json").read_text())
    config.update(sliding_window=16, layer_types=["full_attention", "sliding_attention"])
    config.pop("use_sliding_window", None)  # layer_types alone decides
    (source / "config.json").write_text(json.dumps(config))
    result = _import(source, tmp_path / "ckpt")
    assert result.exit_code == 1, result.output
    one_error(result.output, "on layer 1 (layer_types)")


def test_the_hf_layout_keeps_the_window(tmp_path):
    """An hf-layout import keeps config.json, and transformers applies the window itself."""
    source = _qwen(
        tmp_path, "qwen2", use_sliding_window=True, sliding_window=16, max_window_layers=1
    )
    assert _import(source, tmp_path / "ckpt", layout="hf").exit_code == 0


def test_without_layer_types_max_window_layers_decides(tmp_path):
    """A config.json older transformers wrote (no layer_types): windowed from
    max_window_layers on, as transformers derives them."""
    source = _qwen(tmp_path, "qwen2")
    config = json.loads((source / "config.json").read_text())
    config.pop("layer_types", None)
    config.update(use_sliding_window=True, sliding_window=16, max_window_layers=1)
    (source / "config.json").write_text(json.dumps(config))
    result = _import(source, tmp_path / "ckpt")
    assert result.exit_code == 1, result.output
    one_error(result.output, "on layer 1 (use_sliding_window, max_window_layers=1)")
