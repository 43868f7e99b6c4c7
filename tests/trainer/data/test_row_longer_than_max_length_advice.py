"""A row longer than data.max_length with data.truncation=error is refused with the same
advice however much too long it is: the chat template's size guard, whose bound is derived
from max_length, said "the chat template: rendering it, '<half an expression>' would make
over 104 characters" for rows that were simply long, where a row only a little too long got
"N tokens > data.max_length=32 (raise it or set data.truncation=left|right)". A template
that makes values past what any row may still has its refusal."""

from __future__ import annotations

import pytest

from trainer.config import DataConfig
from trainer.data.chat import ChatFormatError, chat_ids, row_limit
from trainer.data.sft_dataset import tokenize_rows
from trainer.tiny import build_tokenizer

ADVICE = (
    "(raise it or set data.truncation=left|right; verl's sft_trainer at its default"
    " pad_mode=no_padding cut such rows from the right: data.truncation=right does what it did)"
)
QUESTION = "Tom has 11 apples and buys 7 more. How many apples does Tom have now? "
ANSWER = "11 + 7 = 18\n#### 18"


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def refusal(tokenizer, row: dict, max_length: int) -> str:
    data = DataConfig(max_length=max_length, truncation="error")
    with pytest.raises(ChatFormatError) as refused:
        tokenize_rows([row], data, tokenizer, lambda index: f"t.jsonl:{index + 1}", False)
    return str(refused.value)


def chat(question: str) -> dict:
    return {
        "messages": [
            {"role": "user", "content": question},
            {"role": "assistant", "content": ANSWER},
        ]
    }


@pytest.mark.parametrize(
    "row",
    [chat(QUESTION * 2), {"prompt": QUESTION * 2, "response": ANSWER}],
    ids=["messages", "prompt-response"],
)
def test_the_same_advice_at_every_max_length(tokenizer, row):
    """At 8 and 16 tokens the guard finds the row (about 13 characters a token at most), at
    32 the token count does: each line names the row and gives the same advice."""
    said = {length: refusal(tokenizer, row, length) for length in (8, 16, 32)}
    for length, line in said.items():
        assert line.startswith("t.jsonl:1: ") and line.endswith(ADVICE), line
        assert f"data.max_length={length}" in line and "chat template" not in line, line
        assert "\n" not in line


def test_a_row_whose_decoration_passes_the_bound_gets_the_advice(tokenizer):
    """The row's own text is within what 8 tokens can hold (104 characters here); only the
    template's role markers take it past: the row, not the template, is too long."""
    bound = row_limit(tokenizer, "data.max_length", 8).chars
    line = refusal(tokenizer, chat(QUESTION[: bound - 40]), 8)
    assert line.endswith(ADVICE) and "chat template" not in line, line


def test_a_template_growing_a_value_past_any_row_is_still_refused_as_the_template(tokenizer):
    """Refused naming the expression, a text operand cut with `...` where it is cut (cut
    bare, it ran into the words after it)."""
    tokenizer = build_tokenizer()
    tokenizer.chat_template = "{{ messages[0].content * 600000000 }}"
    question = QUESTION[:30]  # the row itself is within what 8 tokens can hold
    line = refusal(tokenizer, chat(question), 8)
    expression = f"{question!r:.20}... * 600000000"
    assert f"the chat template: rendering it, {expression} would make over 104 characters" in line
    assert "raise it" not in line, line


def test_a_value_larger_than_the_row_made_on_the_way_is_no_refusal(tokenizer):
    """A template may build text it does not write out; the row's rendering is within the
    bound, so it is rendered and tokenized as any other."""
    tokenizer = build_tokenizer()
    tokenizer.chat_template = (
        "{% set scratch = messages[0].content * 50 %}"
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    )
    turns = [{"role": "user", "content": "1 + 2?"}, {"role": "assistant", "content": "3"}]
    limit = row_limit(tokenizer, "data.max_length", 16)
    assert len("1 + 2?") * 50 > limit.chars
    rendered = chat_ids(tokenizer, turns, limit)
    assert rendered["text"] == "user: 1 + 2?\nassistant: 3\n"
    assert (
        rendered["input_ids"] == tokenizer(rendered["text"], add_special_tokens=False)["input_ids"]
    )


@pytest.mark.parametrize("repeat", [1, 20], ids=["counted in tokens", "past the text bound"])
def test_a_grpo_prompt_too_long_gets_the_filters_advice_however_long(tokenizer, tmp_path, repeat):
    """With data.filter_overlong_prompts off, a prompt a little too long was refused with
    "(raise it or set data.filter_overlong_prompts=true)", a much longer one, found by the
    text bound before tokenizing, with "(raise it)" alone."""
    import json

    from trainer.grpo.config import RLDataConfig
    from trainer.grpo.data import RLDataError, load_rl_prompts

    row = {
        "prompt": [{"role": "user", "content": QUESTION * repeat}],
        "data_source": "openai/gsm8k",
        "reward_model": {"style": "rule", "ground_truth": "18"},
    }
    path = tmp_path / "rl.jsonl"
    path.write_text(json.dumps(row) + "\n")
    data = RLDataConfig(max_prompt_length=16, filter_overlong_prompts=False)
    with pytest.raises(RLDataError) as refused:
        load_rl_prompts([str(path)], data, tokenizer)
    line = str(refused.value)
    assert line.startswith(f"{path}:1: ") and "data.max_prompt_length=16" in line, line
    assert line.endswith("(raise it or set data.filter_overlong_prompts=true)"), line


def test_all_grpo_prompts_dropped_for_length_gives_the_advice_once(tokenizer, tmp_path):
    """With the filter on, every prompt past the text bound was dropped, and the line quoted
    the first one's refusal, "(raise it)" included, then said "; raise it" again."""
    import json

    from trainer.grpo.config import RLDataConfig
    from trainer.grpo.data import RLDataError, load_rl_prompts

    row = {
        "prompt": [{"role": "user", "content": QUESTION * 20}],
        "data_source": "openai/gsm8k",
        "reward_model": {"style": "rule", "ground_truth": "18"},
    }
    path = tmp_path / "rl.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(RLDataError) as refused:
        load_rl_prompts([str(path)], RLDataConfig(max_prompt_length=16), tokenizer)
    line = str(refused.value)
    assert line.startswith(f"{path}: all 1 prompts are longer than"), line
    assert line.count("raise it") == 1 and line.endswith("(raise it))"), line
