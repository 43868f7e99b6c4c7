"""The values `model.attn_implementation` takes, named without importing torch or
transformers, so that the config loader refuses a typo (`spda`) before anything loads.

A name transformers does not know failed once the model was built, in every rank, as
transformers' own error, whose list of choices the one-line error cut in the middle.
The names are transformers' (eager, and its attention registry: sdpa, the flash attention
versions, flex_attention, paged|eager) and this project's `varlen` (trainer.attention); a
test holds the list to transformers' registry. A Hub kernel repo (`org/name`, which
transformers loads through the `kernels` package, from its cache or the Hub) is left to
transformers: what it holds is not known here.

The FlashAttention versions are CUDA kernels, each in its own package. Without that package
(or on CPU) transformers built the model, then fetched a stand-in kernel from the Hub through
`kernels` and failed in a traceback per rank; `flash_attention_refusal` refuses both before
anything is built, so no run of this project reaches that download.
"""

from __future__ import annotations

from importlib import metadata

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


# The distribution each FlashAttention version needs, as transformers looks it up
# (`is_flash_attn_2_available` and its siblings: FA2 and FA4 share the module `flash_attn`)
FLASH_ATTENTION_PACKAGES = {
    "flash_attention_2": "flash-attn",
    "flash_attention_3": "flash-attn-3",
    "flash_attention_4": "flash-attn-4",
}
ATTENTION_KEY = "model.attn_implementation"


def attention_refusal(value: str, key: str) -> str | None:
    """Why `key` (model.attn_implementation) may not be `value`: every name it takes, and
    the closest; None for one of them, one under `paged|` (transformers' older spelling of
    the same kernel, taken with a warning) or a Hub kernel repo."""
    if value.removeprefix("paged|") in ATTENTION_NAMES or "/" in value:
        return None
    return choice_refusal(key, value, "unknown attention", ATTENTION_NAMES)


def flash_attention_refusal(value: str, device_type: str) -> str | None:
    """Why `model.attn_implementation=value` cannot train on a `device_type` device ("cpu",
    "cuda"): a FlashAttention version on CPU, or without its package; None otherwise."""
    package = FLASH_ATTENTION_PACKAGES.get(value.removeprefix("paged|"))
    if package is None:
        return None
    if device_type == "cpu":
        return (
            f"{ATTENTION_KEY}={value}: FlashAttention needs CUDA (and the {package} package);"
            " use sdpa on CPU"
        )
    if not _installed(package):
        return (
            f"{ATTENTION_KEY}={value}: the {package} package is not installed in this"
            f" environment (pip install {package}); or use sdpa"
        )
    return None


def _installed(distribution: str) -> bool:
    """Whether `distribution` is installed, read from its metadata (nothing is imported)."""
    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True
