"""mfsdp_ckpt: DTensor checkpoints of Megatron-FSDP / FSDP2 training, saved atomically and
read, validated and exported offline on a CPU-only machine.

Importing this package is cheap on purpose (no torch): commands that only print help or a
version stay instant. Import the modules you need; the folders say what they are for:
`checkpointer` (save and load while training), `format/` (what is on disk), `storage/`
(reading and writing bytes), `check/` (validate, describe), `convert/` (to and from HF).
"""

__version__ = "0.2.0"
