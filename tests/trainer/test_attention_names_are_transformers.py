"""`model.attn_implementation` is checked as the config loads, against a list named without
importing transformers (`trainer.attention_names`): that list is what transformers builds a
model with, this project's `varlen` registered, so a value the loader takes is one the model
build takes, and one it refuses is one the build refused (once torch had loaded, in every rank)."""

from __future__ import annotations


def test_the_names_are_those_transformers_builds_with():
    from transformers import AttentionInterface

    import trainer.attention  # noqa: F401  (registers varlen, as kernels.py does before a build)
    from trainer.attention_names import ATTENTION_NAMES

    # what PreTrainedModel.get_correct_attn_implementation accepts
    accepted = ["eager", *AttentionInterface().valid_keys()]
    assert sorted(ATTENTION_NAMES) == sorted(accepted)
    assert len(set(ATTENTION_NAMES)) == len(ATTENTION_NAMES)


def test_a_typo_is_refused_and_a_hub_kernel_repo_left_to_transformers():
    from trainer.attention_names import attention_refusal

    refusal = attention_refusal("spda", "model.attn_implementation")
    assert refusal is not None and "did you mean sdpa?" in refusal and "paged|eager" in refusal
    assert attention_refusal("kernels-community/flash-attn3", "model.attn_implementation") is None
    # transformers 5 still takes its older spelling of sdpa (a FutureWarning): not a typo
    assert attention_refusal("paged|sdpa", "model.attn_implementation") is None
    assert attention_refusal("paged|spda", "model.attn_implementation") is not None
