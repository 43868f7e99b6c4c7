"""The files export copies beside the weights (config, tokenizer, chat template), checked as
export checks them before it copies them.

Export takes them from `--hf-config DIR`, else the checkpoint's own HF dir, else (a config
derived from Megatron-Bridge's record) the iteration's `tokenizer/`, which also gives the
tokenizer files an `--hf-config` holding none lacks. A tokenizer.json this
user may not open, a FIFO, a link out of the checkpoint or a file over its size limit
stopped the export while validate called the step valid. So validate checks the same files
the same way, cheaply: each is stat-ed and opened, none read; with `deep`, the JSON ones
are also read and parsed as export parses them (a key given twice, NaN, a list where
transformers reads an object).
"""

from __future__ import annotations

import os
from pathlib import Path

from mfsdp_ckpt.check.report import ValidationReport, error_location
from mfsdp_ckpt.format import layout
from mfsdp_ckpt.storage.byte_store import CheckpointFileError


def check_export_assets(
    paths: layout.CheckpointPaths,
    report: ValidationReport,
    hf_config: str | os.PathLike | None = None,
) -> None:
    """The first file export would refuse to copy, as an error naming it (module
    docstring); `report.deep` adds reading the JSON ones."""
    from mfsdp_ckpt.convert.export_source import check_copied_assets, holds_tokenizer

    try:
        if hf_config is not None:
            given = Path(hf_config)
            copied = []
            if given.exists():  # a missing one is the config check's finding
                copied = check_copied_assets(given, None, parse_json=report.deep)
            if holds_tokenizer(copied):
                return
        elif paths.hf_assets is not None and paths.hf_assets.is_dir():
            check_copied_assets(
                paths.hf_assets, paths.root, paths.hf_skip, whole=True, parse_json=report.deep
            )
            return
    except (CheckpointFileError, layout.CheckpointPathError) as err:
        base = paths.root if hf_config is None else hf_config  # where every file checked lies
        report.add_error(error_location(err, base), err)
        return
    _check_bridge_tokenizer(paths, report)


def _check_bridge_tokenizer(paths: layout.CheckpointPaths, report: ValidationReport) -> None:
    """The iteration's `tokenizer/`, which export copies with a derived config and with an
    `--hf-config` that holds no tokenizer."""
    from mfsdp_ckpt.convert.export_source import bridge_tokenizer_dir, check_copied_assets

    if paths.tokenizer_dir is None:
        return
    try:
        tokenizer = bridge_tokenizer_dir(paths.tokenizer_dir)
        check_copied_assets(tokenizer, paths.root, whole=True, parse_json=report.deep)
    except (CheckpointFileError, layout.CheckpointPathError) as err:
        report.add_error(error_location(err, paths.root), err)
