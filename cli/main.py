"""Root of the `mfsdp` command: groups `train`, `ckpt`, `data`, and `demo`."""

from __future__ import annotations

import click

from mfsdp_ckpt import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="mfsdp")
def app() -> None:
    """Train LLMs with Megatron-FSDP and work with their DTensor checkpoints.

    \b
    Examples:
      mfsdp demo                                  # tiny end-to-end run on CPU
      mfsdp ckpt validate runs/demo --deep        # is this checkpoint intact?
      mfsdp ckpt export-hf runs/demo --out hf/    # to Hugging Face safetensors
    """


def _register() -> None:
    """Command groups live one per module; importing them here keeps `mfsdp --help` complete."""
    from cli import ckpt, data, demo, train

    for command in (ckpt.ckpt, demo.demo, train.train, data.data):
        app.add_command(command)


_register()


def main() -> None:
    app(prog_name="mfsdp")
