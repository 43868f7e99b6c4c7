"""mfsdp_ckpt: DTensor checkpoints of Megatron-FSDP / FSDP2 training, saved atomically and
read, validated and exported offline on a CPU-only machine.

Importing this package is cheap on purpose (no torch): commands that only print help or a
version stay instant. Import the submodules you need: `layout`, `reader`, `checkpointer`,
`validate`, `export_hf`.
"""

__version__ = "0.1.0"
