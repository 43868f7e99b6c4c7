"""Every key of a chat turn reaches the chat template as the data file gives it, as verl's
MultiTurnSFTDataset passes it.

Only role and content did: a Qwen3-style template's `<think>{{ reasoning_content }}</think>`
rendered nothing, and SFT trained on the reply without its reasoning where verl trained on
both; `name`, `tool_call_id` and the rest were dropped the same way, and so a resume could
not tell a row whose reasoning (or a prompt turn's name) was edited. No key is renamed:
`reasoning` and `thinking` were copied into `reasoning_content`, which neither
transformers nor verl does, and the reply trained with a reasoning verl's did not have.
"""

import json

import pytest

from tests.support.data_tables import read_rows, write_parquet
from trainer.data.chat import (
    ChatColumns,
    messages_of,
    row_limit,
    tokenize_chat,
    turn_keys_texts,
    turn_texts,
)
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.resume import rows_digest
from trainer.tiny import build_tokenizer

# Reads each key a turn may have; `is defined` tells a key left out from one given
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}"
    "{% if m.name is defined %} {{ m.name }}{% endif %}{{ '\n' }}"
    "{% if m.reasoning_content is defined %}<think>{{ m.reasoning_content }}</think>{% endif %}"
    "{{ m.content }}"
    "{% if m.tool_calls is defined %}{% for call in m.tool_calls %}"
    "<tool_call>{{ call.function | tojson }}</tool_call>{% endfor %}{% endif %}"
    "{% if m.tool_call_id is defined %} [{{ m.tool_call_id }}]{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CALL = {"type": "function", "function": {"name": "weather", "arguments": {"city": "Oslo"}}}
TURNS = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "weather?", "name": "ann"},
    {"role": "assistant", "content": "", "tool_calls": [CALL], "thinking": "ask the tool"},
    {"role": "tool", "content": "rain", "tool_call_id": "call_1"},
    {"role": "assistant", "content": "It rains.", "reasoning_content": "the tool said so"},
]


@pytest.fixture(scope="module")
def tokenizer():
    tokenizer = build_tokenizer()
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def transformers_ids(tokenizer, turns, add_generation_prompt=False):
    """What transformers' apply_chat_template gives verl for the turns as the file has them."""
    return list(
        tokenizer.apply_chat_template(
            turns, tokenize=True, return_dict=True, add_generation_prompt=add_generation_prompt
        )["input_ids"]
    )


def trained_text(tokenizer, example):
    return tokenizer.decode([t for t, m in zip(example.input_ids, example.loss_mask) if m])


def sft_example(tokenizer, row):
    messages = messages_of(row, ChatColumns())
    return tokenize_chat(tokenizer, messages, row_limit(tokenizer, "data.max_length", 512))


def test_every_key_of_a_turn_is_rendered_as_transformers_renders_it(tokenizer):
    example = sft_example(tokenizer, {"messages": TURNS})
    assert example.input_ids == transformers_ids(tokenizer, TURNS)
    trained = trained_text(tokenizer, example)
    assert "<think>the tool said so</think>It rains." in trained
    assert '<tool_call>{"name": "weather"' in trained


def test_a_parquet_struct_column_s_null_keys_are_left_out(tokenizer, tmp_path):
    """A parquet struct column gives every turn every key some turn has, null where it has
    none: passed on as None (as transformers passes it), a template testing `is defined`
    wrote `<think>None</think>`. The row renders as the turns without those keys."""
    path = write_parquet([{"messages": TURNS}], tmp_path / "chat.parquet")
    (row,) = read_rows(str(path))
    assert row["messages"][0]["reasoning_content"] is None  # the struct's null, as read
    example = sft_example(tokenizer, row)
    assert example.input_ids == transformers_ids(tokenizer, TURNS)
    assert "None" not in tokenizer.decode(example.input_ids)


def test_a_turn_s_keys_reach_the_template_under_their_own_names(tokenizer):
    """The template reads `reasoning_content` only: a turn's `thinking` is a key it ignores,
    so the turn trains as it would without it (not with `<think>...`)."""
    plain = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "ans"}]
    named = [plain[0], {**plain[1], "thinking": "my reasoning"}]
    with_key, without = (sft_example(tokenizer, {"messages": turns}) for turns in (named, plain))
    assert with_key.input_ids == without.input_ids
    assert "my reasoning" not in tokenizer.decode(with_key.input_ids)


def test_a_replys_reasoning_reaches_the_template_as_vllm_hands_it_on(tokenizer):
    """vLLM 0.32's replies write `reasoning`, and it hands that to the template as
    `reasoning_content` too: the turn trains as one with `reasoning_content`."""
    plain = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "ans"}]
    rows = [
        [plain[0], {**plain[1], key: "my reasoning"}] for key in ("reasoning", "reasoning_content")
    ]
    served, given = (sft_example(tokenizer, {"messages": turns}) for turns in rows)
    assert served.input_ids == given.input_ids
    assert "my reasoning" in tokenizer.decode(served.input_ids)


def write_rl_rows(path, prompts):
    rows = [{"prompt": prompt, "reward_model": {"ground_truth": "7"}} for prompt in prompts]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_grpo_prompt_turns_keep_their_keys_and_an_edited_key_is_an_edited_prompt(
    tokenizer, tmp_path
):
    asked = [{"role": "user", "content": "weather?", "name": "ann"}]
    renamed = [{**asked[0], "name": "bob"}]
    files = [write_rl_rows(tmp_path / "rl.jsonl", [asked, renamed])]
    prompts, _ = load_rl_prompts(files, RLDataConfig(), tokenizer, custom_reward=True)
    assert prompts[0].prompt_ids == transformers_ids(tokenizer, asked, True)
    assert prompts[1].prompt_ids == transformers_ids(tokenizer, renamed, True)
    assert rows_digest([prompts[0].prompt_keys]) != rows_digest([prompts[1].prompt_keys])


def test_an_edited_reasoning_is_an_edited_row(tokenizer):
    """The rows digest of SFT is the trained tokens: the reasoning the template renders into
    the reply is among them."""
    edited = [*TURNS[:-1], {**TURNS[-1], "reasoning_content": "it said rain"}]
    first, second = (sft_example(tokenizer, {"messages": turns}) for turns in (TURNS, edited))
    assert trained_text(tokenizer, first) != trained_text(tokenizer, second)


def test_a_prompt_turn_s_other_keys_have_their_own_text_and_null_ones_none():
    """The resume compares a prompt's role and content text and, apart, its turns' other
    keys; a key with a null value is none the template sees (a parquet struct's filler), so
    such a prompt reads as one without it."""
    turn = {"role": "user", "content": "q"}
    assert turn_texts([{**turn, "name": "ann"}]) == turn_texts([turn]) == ("user", "q")
    assert turn_keys_texts([{**turn, "name": "ann"}]) != turn_keys_texts([{**turn, "name": "bob"}])
    assert turn_keys_texts([{**turn, "name": "ann"}]) != turn_keys_texts([turn])
    assert turn_keys_texts([{**turn, "name": None, "tool_calls": None}]) == turn_keys_texts([turn])
