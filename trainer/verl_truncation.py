"""Which end of an over-long SFT row verl's `sft_trainer` cuts, for `mfsdp config from-verl`.

verl's MultiTurnSFTDataset reads `data.truncation` only at `data.pad_mode=right`. At
`no_padding`, sft_trainer_engine.yaml's default, it keeps a row's first `data.max_length`
tokens whatever `data.truncation` says, its default `error` included. mfsdp cuts as
`data.truncation` says. A converted `truncation: left` trained the other end of every
over-long chat, and one that kept verl's `error` refused rows verl trained. The legacy
`fsdp_sft_trainer` has no pad_mode (its rows are padded): it honours `data.truncation`, as
mfsdp does.
"""

from __future__ import annotations

from typing import Any

SFT_TRAINER = "verl.trainer.sft_trainer"
NO_PADDING = "no_padding"  # sft_trainer_engine.yaml's data.pad_mode


def no_padding_truncation(
    tree: dict[str, Any], given: dict[str, Any], module: str | None
) -> list[str]:
    """Write `data.truncation: right` into `tree` (the converted config) where verl cut
    from the right whatever the source's `data.truncation` says: a script of verl's
    `sft_trainer` at pad_mode no_padding, or a YAML that sets that pad_mode, which only
    sft_trainer's config has. `given`: the source's keys as the rules read them
    (`verl_keys.keys_given`). One note where the source's value (or verl's default `error`)
    is not `right`."""
    from trainer.config import set_dotted

    pad_mode = given.get("data.pad_mode", NO_PADDING if module == SFT_TRAINER else None)
    if pad_mode != NO_PADDING or module not in (SFT_TRAINER, None):
        return []
    said = (tree.get("data") or {}).get("truncation", given.get("data.truncation", "error"))
    set_dotted(tree, "data.truncation", "right")
    if said == "right":
        return []
    return [
        f"data.truncation=right: verl's sft_trainer at pad_mode=no_padding (its default)"
        f" keeps an over-long row's first data.max_length tokens whatever data.truncation says"
        f" (the source's {said} is read only at pad_mode=right); mfsdp cuts as data.truncation"
        " says"
    ]
