"""generation_config.json, read as transformers reads it.

`AutoModelForCausalLM.from_pretrained` builds a `GenerationConfig` from the model dir's
generation_config.json and validates it as it does: `max_new_tokens: -5` stops the load
with a ValueError, so an export carrying that file would not load, and a training run from
it failed only as transformers built the model (blaming config.json). So every command that
copies or reads one (import-hf, export-hf, `validate --deep`, training, GRPO's EOS ids)
builds the same GenerationConfig from its parsed data first, in this one place: from the
dict alone (nothing is downloaded, nothing from the dir runs), refused where transformers
refuses it, accepted where transformers accepts it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from mfsdp_ckpt.check.printable import cut_to
from mfsdp_ckpt.storage.tensor_memory import reraise_if_out_of_memory

GENERATION_CONFIG_FILE = "generation_config.json"


def generation_config(settings: dict, where: str, error: type[Exception]) -> Any:
    """transformers' GenerationConfig of generation_config.json's parsed `settings`, as
    `from_pretrained` builds it (`GenerationConfig.from_dict`, validated), else `error` in
    one line naming `where`, with transformers' reason (which names the key where it says
    one: "`max_new_tokens` must be greater than 0"). transformers raises a ValueError for
    what it validates and TypeError or AttributeError for a value of a type it never
    expected (`max_new_tokens: "5"`): each is a file it cannot read."""
    from transformers import GenerationConfig

    try:
        with _quiet_transformers():
            return GenerationConfig.from_dict(settings)
    except Exception as err:  # whatever transformers raises building it, the file is at fault
        reraise_if_out_of_memory(err)  # the machine's limit, not the file's fault
        said = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
        raise error(
            f"{where}: transformers cannot read it as a generation config"
            f" ({type(err).__name__}: {cut_to(said, 200)})"
        ) from None


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' warnings off while a file is checked (flags it would ignore are not a
    fault of the file), restored after."""
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


__all__ = ["GENERATION_CONFIG_FILE", "generation_config"]
