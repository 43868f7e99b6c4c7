"""Errors about a checkpoint's contents, importable without torch.

The CLI names them in its error handling for every command, so `mfsdp --help` and the
commands that fail early (a bad path, bad usage) must not pay for importing torch to
learn these two names.
"""

from __future__ import annotations


class CheckpointFormatError(ValueError):
    """The metadata describes something inconsistent; the message names the tensor."""


class UnsafeMetadataError(ValueError):
    """The `.metadata` file is not plain DCP metadata (it names a forbidden global, or is damaged)."""
