"""What the vLLM engine needs, refused before anything loads (exit 2, one line).

Past the model's context vLLM returned NaN log-probs and token 0 for every position past it,
with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 letting it through, and the run trained on them: that
switch lifts the limit for the hf engine alone. VLLM_CPU_KVCACHE_SPACE set to no whole number
of GiB failed once torch, the model and vLLM had loaded, in vLLM's words, which named neither
the variable nor its value."""

import pytest

from mfsdp_ckpt.errors import EXIT_USAGE
from tests.support.grpo import grpo_config, write_rl_rows
from trainer.config import ConfigError
from trainer.prerequisites import check_prerequisites

LONG = "rollout.max_response_length=600"  # + 32 prompt tokens: past the tiny shape's 512


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return write_rl_rows(tmp_path_factory.mktemp("rows") / "rl.jsonl")


@pytest.mark.parametrize("engine", ["vllm", "auto"])  # auto: vLLM is installed here
def test_vllm_past_the_context_is_refused_even_where_vllm_would_allow_it(
    rows, tmp_path, monkeypatch, engine
):
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    check_prerequisites(grpo_config(rows, tmp_path, LONG, "rollout.name=hf"))
    with pytest.raises(ConfigError) as caught:
        check_prerequisites(grpo_config(rows, tmp_path, LONG, f"rollout.name={engine}"))
    said = str(caught.value)
    assert said.startswith("data.max_prompt_length + rollout.max_response_length = 32 + 600"), said
    assert said.endswith(
        "(VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 lets only rollout.name=hf run past it: vLLM returns"
        " NaN log-probs and token 0 there)"
    ), said


@pytest.mark.parametrize("value", ["abc", "1.5", "-1", "", "2 GiB"])
def test_a_kv_cache_size_that_is_no_whole_number_is_named(rows, tmp_path, monkeypatch, value):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", value)
    check_prerequisites(grpo_config(rows, tmp_path))  # the hf engine does not read it
    with pytest.raises(ConfigError) as caught:
        check_prerequisites(grpo_config(rows, tmp_path, "rollout.name=vllm"))
    assert str(caught.value) == (
        f"the environment variable VLLM_CPU_KVCACHE_SPACE is {value!r}, not a whole number of"
        " GiB (0 or more): the size of the vLLM engine's KV cache on CPU; set it to one, or"
        " unset it for 1"
    )
    assert caught.value.exit_code == EXIT_USAGE
    # vLLM reads it on CPU alone: a run on a GPU is not refused for it
    check_prerequisites(grpo_config(rows, tmp_path, "rollout.name=vllm", "trainer.device=cuda"))


@pytest.mark.parametrize("value", ["0", "2", " 3 "])
def test_whole_kv_cache_sizes_pass(rows, tmp_path, monkeypatch, value):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", value)
    check_prerequisites(grpo_config(rows, tmp_path, "rollout.name=vllm"))
