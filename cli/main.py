"""Root of the `mfsdp` command: groups `train`, `ckpt`, `data`, and `demo`."""

from __future__ import annotations

import click

from mfsdp_ckpt import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="mfsdp")
@click.option("-v", "--verbose", count=True, help="Log what the library does (-v: checkpoint save/load timings).")
def app(verbose: int) -> None:
    """Train LLMs with Megatron-FSDP and work with their DTensor checkpoints.

    \b
    Examples:
      mfsdp demo                                  # tiny end-to-end run on CPU
      mfsdp ckpt validate runs/demo/sft --deep    # is this checkpoint intact?
      mfsdp ckpt export-hf runs/demo/sft --out hf/    # to Hugging Face safetensors
      mfsdp -v train sft --config examples/sft_tiny_cpu.yaml    # with save/load timings
    """
    from cli.verbosity import set_verbosity

    set_verbosity(verbose)


def _register() -> None:
    """Command groups live one per module; importing them here keeps `mfsdp --help` complete."""
    from cli import ckpt, config, data, demo, train

    for command in (ckpt.ckpt, demo.demo, train.train, data.data, config.config):
        app.add_command(command)


_register()


def main() -> None:
    app(prog_name="mfsdp")
