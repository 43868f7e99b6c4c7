"""Buffers some saves hold beside a model's weights, which loading the model ignores.

Older transformers versions (and remote-code models) persisted each attention layer's
`rotary_emb.inv_freq`; `from_pretrained` drops it (`_keys_to_ignore_on_load_unexpected`)
and recomputes it from the config. A state dict holding it, in safetensors or in a DCP
(an FSDP save of such a model), is the same model without it: import-hf, export-hf and
validate all leave it out with one note, from this one list.
"""

from __future__ import annotations

from collections.abc import Iterable

IGNORED_BUFFERS = (".rotary_emb.inv_freq",)


def ignored_buffers(names: Iterable[str]) -> list[str]:
    """The names among `names` that are buffers loading ignores, in their order."""
    return [name for name in names if name.endswith(IGNORED_BUFFERS)]


def left_out_note(buffers: list[str]) -> str:
    """The one line saying `buffers` (not empty) were left out, and why that changes nothing."""
    return (
        f"{len(buffers)} stored rotary buffer(s) ({buffers[0]}, ...) left out: loading"
        " recomputes them from the config"
    )


__all__ = ["IGNORED_BUFFERS", "ignored_buffers", "left_out_note"]
