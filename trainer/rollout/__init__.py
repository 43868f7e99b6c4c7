"""Rollout engines: generate n responses per prompt and take the actor's new weights each step.

One interface (`base.RolloutEngine`), two engines: `vllm` (colocated, in-process vLLM) where
vLLM is installed, and `hf` (transformers weights, own KV-cache decoding) everywhere else.
`build.build_rollout_engine` picks one.
"""
