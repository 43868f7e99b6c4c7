"""The refusals of what a template leaves out quote what it drops and name the text it is
dropped from.

Was: DeepSeek-R1's template keeps only what follows `</think>`, and the refusal quoted the
first line missing, '<think>', as if only the tag were lost; a GRPO prompt's system turn
that Mistral's template drops was "left out of the training text", of a prompt.
"""

import pytest

from tests.support.real_chat_templates import qwen_tokenizer
from tests.support.tool_call_chats import (
    USER,
    grpo_prompt_ids,
    sft_rows,
)
from trainer.data.chat import ChatFormatError
from trainer.grpo.data import RLDataError

REASONING = "<think>\nOslo is in Norway.\nIt is winter there.\n</think>"


def test_reasoning_cut_off_is_quoted_whole(tmp_path):
    r1 = qwen_tokenizer("deepseek_r1_jan2025")
    reply = {"role": "assistant", "content": f"{REASONING}\n\nIt is 20."}
    with pytest.raises(ChatFormatError) as err:
        sft_rows(r1, tmp_path / "sft.jsonl", [[USER, reply]])
    assert f"leaves out its content in part ({REASONING!r})" in str(err.value)


def test_a_prompts_dropped_turn_is_left_out_of_the_prompt(tmp_path):
    mistral = qwen_tokenizer("vllm_mistral")
    system = {"role": "system", "content": "Be brief."}
    with pytest.raises(RLDataError) as err:
        grpo_prompt_ids(
            mistral,
            tmp_path / "rl.jsonl",
            [system, USER, {"role": "assistant", "content": "Hi."}, USER],
        )
    line = str(err.value)
    assert "turn 1, role 'system'" in line and "left out of the prompt" in line
    assert "training text" not in line
