"""export-hf of a checkpoint given as a `file://` URL, with --verify, on each layout the URL
export reads (an mfsdp run, a Megatron-LM run whose config.json is derived from its `args`,
verl's RL and SFT runs, v1 and v2, and verl's Megatron-Bridge run), named at its run dir so
that the step dir, the tracker file and the huggingface/ dir are each joined onto the URL.

The reader of a URL's DCP kept its root as a Path, which made `file:///abs/iter_0000100`
`file:/abs/iter_0000100`: the derived config was said to come from that, and --verify, reading
the name back as a URL, exited 2 ("not a URL of the form file:///abs/path") and wrote
nothing. Every name of the source a message gives must keep its `//`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli, verl_rl_v1, verl_rl_v2, verl_sft, verl_sft_v2
from tests.support.megatron_checkpoints import megatron_args, megatron_run, verl_bridge_run
from tests.support.paths import FIXTURES

# `file:` followed by one slash alone: a URL whose `//` a path join collapsed
_SLASH_LOST = re.compile(r"file:/(?!/)")


def _mfsdp(root: Path, made_optim: Path) -> Path:
    return FIXTURES / "megatron_fsdp_qwen2" / "run"


def _megatron_lm(root: Path, made_optim: Path) -> Path:
    model = tiny_causal_lm("llama", vocab=100)
    return megatron_run(root, model, megatron_args(model, padded_vocab_size=128), rows=128)


def _verl_bridge(root: Path, made_optim: Path) -> Path:
    return verl_bridge_run(root, tiny_causal_lm("llama", vocab=100))


LAYOUTS = {
    "mfsdp": _mfsdp,
    "megatron-lm-args": _megatron_lm,
    "verl-megatron-bridge": _verl_bridge,
    **{
        name: lambda root, made_optim, lay=lay: lay(made_optim, root).run
        for name, lay in {
            "verl-rl-v1": verl_rl_v1,
            "verl-rl-v2": verl_rl_v2,
            "verl-sft": verl_sft,
            "verl-sft-v2": verl_sft_v2,
        }.items()
    },
}


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_a_file_url_exports_and_verifies_as_its_local_path(layout, made_optim, tmp_path):
    run = layout(tmp_path / "source", made_optim)
    code, out, err = run_cli(
        "ckpt", "export-hf", f"file://{run}", "--out", tmp_path / "url", "--verify"
    )
    assert code == 0, out + err
    assert not _SLASH_LOST.search(out + err), out + err
    if layout is _megatron_lm:
        assert f"config.json derived from file://{run}/iter_0000100 [args]" in err, err
    code, out, err = run_cli("ckpt", "export-hf", run, "--out", tmp_path / "local")
    assert code == 0, out + err
    from_url = load_file(tmp_path / "url" / "model.safetensors")
    local = load_file(tmp_path / "local" / "model.safetensors")
    assert from_url.keys() == local.keys()
    assert all(from_url[name].equal(local[name]) for name in local)
