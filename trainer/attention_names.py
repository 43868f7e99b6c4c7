"""The values `model.attn_implementation` takes, named without importing torch or
transformers, so that the config loader refuses a typo (`spda`) before anything loads.

A name transformers does not know failed once the model was built, in every rank, as
transformers' own error, whose list of choices the one-line error cut in the middle.
The names are transformers' (eager, and its attention registry: sdpa, the flash attention
versions, flex_attention, paged|eager) and this project's `varlen` (trainer.attention); a
test holds the list to transformers' registry. A Hub kernel repo (`org/name`, which
transformers loads through the `kernels` package, from its cache or the Hub) is left to
transformers: what it holds is not known here.
"""

from __future__ import annotations

from trainer.config_suggestions import choice_refusal

ATTENTION_NAMES = (
    "sdpa",
    "eager",
    "varlen",
    "flex_attention",
    "flash_attention_2",
    "flash_attention_3",
    "flash_attention_4",
    "paged|eager",
)


def attention_refusal(value: str, key: str) -> str | None:
    """Why `key` (model.attn_implementation) may not be `value`: every name it takes, and
    the closest; None for one of them, one under `paged|` (transformers' older spelling of
    the same kernel, taken with a warning) or a Hub kernel repo."""
    if value.removeprefix("paged|") in ATTENTION_NAMES or "/" in value:
        return None
    return choice_refusal(key, value, "unknown attention", ATTENTION_NAMES)
