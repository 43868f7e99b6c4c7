"""The type of every option or argument that takes one of a few words: click's Choice, whose
refusal also names the closest choice.

A mistyped command or option gets "(did you mean 'sft'?)"; a mistyped choice (`mfsdp config
defaults sfr`, `--role actr`) got only the list, leaving the user to spot the typo.
"""

from __future__ import annotations

from typing import Any

import click

from trainer.config_suggestions import closest_choice


class Choice(click.Choice):
    """`click.Choice`, with the closest choice (difflib's cutoff, as click's own suggestions
    for commands and options; case aside) named when a value is none of them."""

    def get_invalid_choice_message(self, value: Any, ctx: click.Context | None) -> str:
        told = super().get_invalid_choice_message(value, ctx)
        close = closest_choice(str(value), [str(choice) for choice in self.choices])
        if close is None:
            return told
        return f"{told.rstrip('.')} (did you mean {close!r}?)"


__all__ = ["Choice"]
