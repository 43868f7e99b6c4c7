"""`export-hf --max-shard-size` limits the tensor bytes of each safetensors file, as
transformers' `max_shard_size` does: each file's JSON header comes on top (a file of a
thousand tiny tensors is larger than the limit by its header), and a tensor larger than the
limit gets a file of its own. Was: the help called it the "Largest safetensors file"."""

from __future__ import annotations

from click.testing import CliRunner

from cli.app import app


def test_the_help_says_what_it_limits():
    result = CliRunner().invoke(app, ["ckpt", "export-hf", "--help"], terminal_width=400)
    assert result.exit_code == 0
    help_text = " ".join(result.output.split())
    assert "Most tensor bytes per safetensors file" in help_text
    assert "each file's JSON header comes on top" in help_text
    assert "Largest safetensors file" not in help_text
