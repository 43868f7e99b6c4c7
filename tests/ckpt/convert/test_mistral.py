"""Mistral (MistralForCausalLM) through import-hf and export-hf.

Llama's names and layout with no biases, a `head_dim` of its own (here 16, while
hidden / heads is 8, so the mcore QKV rows follow head_dim) and a `sliding_window`:
Megatron-core GPT layers run full attention, so a window narrower than the positions
has no mcore form and is refused, naming the key; null or a wide window converts.
"""

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from cli.main import app
from mfsdp_ckpt.convert.export_hf import export_hf
from mfsdp_ckpt.convert.import_hf import import_hf
from mfsdp_ckpt.storage.reader import CheckpointReader
from tests.support.cli_errors import without_phase_lines
from tests.support.hf_model_files import TINY as IMPORT_TINY
from tests.support.hf_model_files import assert_same_tensors, safetensors_tensors

# test_import_hf's tiny shape in fp32 (logits compare exactly), with head_dim 16 where
# hidden / heads would be 8
TINY = {key: value for key, value in IMPORT_TINY.items() if key != "dtype"} | {"head_dim": 16}


def _mistral(root: Path, tied: bool = False, **config) -> Path:
    """A random tiny MistralForCausalLM saved by transformers itself (fp32: logits compare
    exactly)."""
    from transformers import MistralConfig, MistralForCausalLM

    settings = {"sliding_window": None, **TINY, **config}
    torch.manual_seed(0)
    model = MistralForCausalLM(MistralConfig(tie_word_embeddings=tied, **settings))
    out = root / f"mistral_{'tied' if tied else 'untied'}"
    model.save_pretrained(out)
    return out


def _logits(model_dir: Path) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tokens = torch.arange(40).reshape(2, 20) % TINY["vocab_size"]
    with torch.no_grad():
        return model(tokens).logits


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("layout_name", ["mcore", "hf"])
def test_round_trip_is_bit_exact_and_computes_the_same(layout_name, tied, tmp_path):
    source = _mistral(tmp_path, tied)
    import_hf(source, tmp_path / "ckpt", layout_name=layout_name)
    hf_config = {"hf_config": source} if layout_name == "mcore" else {}
    export_hf(tmp_path / "ckpt", tmp_path / "back", **hf_config)
    assert_same_tensors(safetensors_tensors(source), safetensors_tensors(tmp_path / "back"))
    assert json.loads((tmp_path / "back" / "config.json").read_text())["model_type"] == "mistral"
    assert torch.equal(_logits(source), _logits(tmp_path / "back"))


def test_mcore_qkv_rows_follow_head_dim(tmp_path):
    source = _mistral(tmp_path)
    import_hf(source, tmp_path / "ckpt", layout_name="mcore")
    shapes = {k: v.shape for k, v in CheckpointReader(tmp_path / "ckpt").tensors.items()}
    qkv = next(
        s for k, s in shapes.items() if k.endswith("layers.0.self_attention.linear_qkv.weight")
    )
    heads, kv_heads, head_dim = TINY["num_attention_heads"], TINY["num_key_value_heads"], 16
    assert tuple(qkv) == ((heads + 2 * kv_heads) * head_dim, TINY["hidden_size"])
    assert not any(k.endswith(".bias") for k in shapes)


@pytest.mark.parametrize("window", [None, 64, 4096], ids=["null", "equal", "wider"])
def test_a_window_that_never_narrows_attention_converts(window, tmp_path):
    source = _mistral(tmp_path, sliding_window=window)
    result = CliRunner().invoke(
        app, ["ckpt", "import-hf", str(source), "--out", str(tmp_path / "ckpt")]
    )
    assert result.exit_code == 0, result.output


def _one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    return lines[0]


def test_import_refuses_a_narrow_sliding_window(tmp_path):
    source = _mistral(tmp_path, sliding_window=16)
    runner = CliRunner()
    out = tmp_path / "ckpt"
    result = runner.invoke(app, ["ckpt", "import-hf", str(source), "--out", str(out)])
    assert result.exit_code == 1, result.output
    line = _one_error_line(without_phase_lines(result.output))
    assert "sliding_window=16" in line and "max_position_embeddings=64" in line, line
    assert "full attention" in line
    assert not out.exists()
    # the key left out means transformers' default window of 4096: narrower than 8192
    config = json.loads((source / "config.json").read_text())
    del config["sliding_window"]
    config["max_position_embeddings"] = 8192
    (source / "config.json").write_text(json.dumps(config))
    result = runner.invoke(app, ["ckpt", "import-hf", str(source), "--out", str(out)])
    assert result.exit_code == 1 and "sliding_window=4096" in result.output, result.output


def test_export_of_mcore_refuses_a_narrow_sliding_window(tmp_path):
    source = _mistral(tmp_path)
    import_hf(source, tmp_path / "ckpt", layout_name="mcore")
    config = json.loads((source / "config.json").read_text())
    config["sliding_window"] = 32
    (tmp_path / "windowed.json").write_text(json.dumps(config))
    out = tmp_path / "back"
    result = CliRunner().invoke(
        app,
        [
            "ckpt",
            "export-hf",
            str(tmp_path / "ckpt"),
            "--out",
            str(out),
            "--hf-config",
            str(tmp_path / "windowed.json"),
        ],
    )
    assert result.exit_code == 1, result.output
    line = _one_error_line(result.output)
    assert "sliding_window=32" in line and "full attention" in line, line
    assert not out.exists()
