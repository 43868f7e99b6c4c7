"""What the `vllm` rollout engine needs of vLLM, read without importing vLLM or torch: the
oldest vLLM the engine's calls work with, and the sampling settings vLLM refuses, so a config
that vLLM would refuse at the first step is refused where the config is checked."""

from __future__ import annotations

# The engine calls CPU attention's declared head sizes, `LLM(logprobs_mode=...)`, the
# worker's `reload_weights(weights_iterator=...)` and the reload logger; the oldest vLLM it
# was run with that has them all.
VLLM_MIN_VERSION = "0.32.0"
# vLLM's SamplingParams refuses a temperature above this
VLLM_MAX_TEMPERATURE = 2.0


def vllm_version_refusal(found: str) -> str | None:
    """Why vLLM `found` (its `__version__`) is too old for the engine, or None; a version
    that does not parse is left to the engine's calls to judge."""
    from packaging.version import InvalidVersion, Version

    try:
        too_old = Version(found).release < Version(VLLM_MIN_VERSION).release
    except InvalidVersion:
        return None
    if not too_old:
        return None
    return f"vLLM {found} found, mfsdp needs >= {VLLM_MIN_VERSION} (pip install -U vllm)"


def vllm_temperature_refusal(temperature: float, why: str) -> str | None:
    """The line refusing `rollout.temperature` vLLM would refuse at the first step, or None;
    `why` says why the run uses vLLM."""
    if temperature <= VLLM_MAX_TEMPERATURE:
        return None
    return (
        f"rollout.temperature={temperature:g}: vLLM samples only in [0, {VLLM_MAX_TEMPERATURE:g}]"
        f" ({why}); lower it, or use rollout.name=hf"
    )
