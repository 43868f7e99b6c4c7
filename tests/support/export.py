"""Helpers shared by the export tests: tiny HF models, fixed inputs, logits of an export."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

FIXED_INPUT_SEED = 1234


def fixed_inputs(vocab_size: int, batch: int = 2, length: int = 12) -> torch.Tensor:
    generator = torch.Generator().manual_seed(FIXED_INPUT_SEED)
    return torch.randint(0, vocab_size, (batch, length), generator=generator)


def logits_of(
    model_dir: str | Path, input_ids: torch.Tensor, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Load an export exactly as a user would and run it."""
    from transformers import AutoModelForCausalLM

    kwargs = {"dtype": dtype} if dtype is not None else {}
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), **kwargs).eval()
    with torch.no_grad():
        return model(input_ids=input_ids).logits.float()


def load_report(model_dir: str | Path) -> dict:
    """from_pretrained's loading info: missing/unexpected/mismatched keys must all be empty."""
    from transformers import AutoModelForCausalLM

    _model, info = AutoModelForCausalLM.from_pretrained(str(model_dir), output_loading_info=True)
    return {k: sorted(v) if isinstance(v, (set, list)) else v for k, v in info.items() if v}


def copy_hf_assets_from(model_dir: Path):
    """An `hf_assets` callable for Checkpointer.save that copies config and tokenizer files."""

    def copy(target: Path) -> None:
        for file in model_dir.iterdir():
            if file.is_file() and not file.name.endswith(".safetensors"):
                shutil.copy2(file, target / file.name)

    return copy


def save_single_process_checkpoint(
    run_dir: Path, assets_dir: Path, seed: int = 0
) -> torch.nn.Module:
    """A one-process checkpoint of the tiny model through Checkpointer; returns the model."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from mfsdp_ckpt.checkpointer import Checkpointer
    from trainer.state import ModelState, OptimizerState

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(assets_dir))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    Checkpointer(run_dir, strategy="none", model_family="qwen2").save(
        1,
        {
            "model": ModelState(model),
            "optimizer": OptimizerState(model, optimizer),
            "extra": {"step": 1},
        },
        contents=("model", "extra"),
        hf_assets=copy_hf_assets_from(assets_dir),
    )
    return model.eval()


def verify_export_dir(ckpt: str | Path, out_dir: str | Path) -> list[str]:
    """What `export-hf --verify` reports of the export in `out_dir` (`verify_export`, one
    line per problem), checked again after the export was written: the tests change an
    export's files after it was made, which the command's own check, run before it
    publishes the export, cannot see. The plan is made as the export made it, with the
    dtype of the export's own config.json."""
    from mfsdp_ckpt.convert.export_plan import plan_export
    from mfsdp_ckpt.convert.export_source import load_config, resolve_source
    from mfsdp_ckpt.convert.export_verify import verify_export

    config = load_config(Path(out_dir) / "config.json")
    return verify_export(plan_export(resolve_source(str(ckpt), "auto"), config), out_dir)
