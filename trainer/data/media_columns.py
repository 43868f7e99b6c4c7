"""Data files of verl's multimodal layout (geo3k's: an `images` column, `<image>` in the
prompt text) refused, naming the file and the column.

The models trained here read text alone, and rows are read through the columns the run
reads, so such a file trained text-only without a word: the policy was asked
"<image>Find x in figure 4" with no figure. verl reads the column its `data.image_key`
(`data.video_key`) names, `images` (`videos`) unless set; those keys are ignored here
(docs/verl.md), so the columns of those names are what marks such a file, as other verl
features that would be dropped are refused.
"""

from __future__ import annotations

import os

from trainer.data.files import DataFileError, columns_held

# each media column verl reads by default, and the verl key that names it
MEDIA_COLUMNS = {"images": "data.image_key", "videos": "data.video_key"}


def refuse_media_columns(path: str | os.PathLike) -> None:
    """Refuse (DataFileError) the data file at `path` where it has a media column."""
    held = columns_held(path, MEDIA_COLUMNS)
    if held:
        column = held[0]
        raise DataFileError(
            f"{path}: column '{column}' (verl's {MEDIA_COLUMNS[column]}): multimodal rows are"
            " not supported, the models trained here read text alone (the prompts would"
            f" train without their {column}); drop the column to train on the text"
        )
