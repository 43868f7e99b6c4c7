"""`mfsdp demo`: the whole product on a tiny model, on CPU, with nothing downloaded."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="runs/demo", show_default=True,
              help="Run directory to create (replaced if it exists).")
def demo(out_dir: str) -> None:
    """Build a tiny Qwen2-shaped model and tokenizer locally, take an optimizer step,
    checkpoint it through the checkpoint layer, then validate and inspect the checkpoint.

    \b
    Example:
      mfsdp demo --out /tmp/mfsdp-demo
    """
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    from mfsdp_ckpt.checkpointer import Checkpointer
    from mfsdp_ckpt.inspect import describe_checkpoint, format_description
    from mfsdp_ckpt.validate import validate_checkpoint
    from trainer.state import ModelState, OptimizerState
    from trainer.tiny import build_tiny_model_dir

    out = Path(out_dir)
    shutil.rmtree(out, ignore_errors=True)
    model_dir = build_tiny_model_dir(out / "init_model")
    torch.manual_seed(0)
    from transformers import AutoConfig

    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randint(0, model.config.vocab_size, (2, 32))
    loss = model(input_ids=batch, labels=batch).loss
    loss.backward()
    optimizer.step()
    click.echo(f"[demo] one step on CPU, loss {loss.item():.4f}")

    def copy_hf_assets(target: Path) -> None:
        for file in model_dir.iterdir():
            shutil.copy2(file, target / file.name)

    checkpointer = Checkpointer(out, strategy="none", model_family="qwen2")
    step_dir = checkpointer.save(
        1,
        {"model": ModelState(model), "optimizer": OptimizerState(model, optimizer), "extra": {"step": 1}},
        hf_assets=copy_hf_assets,
    )
    click.echo(f"[demo] saved {step_dir}")
    report = validate_checkpoint(out, deep=True)
    for finding in report.findings:
        click.echo(f"[demo] {finding}")
    click.echo(f"[demo] validate --deep: {'valid' if report.ok() else 'INVALID'}")
    click.echo(format_description(describe_checkpoint(out)))
    if not report.ok():
        raise SystemExit(1)
