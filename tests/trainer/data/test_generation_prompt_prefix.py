"""A template whose generation prompt is not how its assistant turns start (DeepSeek-R1's
`<think>\\n`) left each turn's first tokens untrained, or the whole turn: 0 targets, loss
0.0000 every step, exit 0. Such templates are refused, as is a run with no target at all."""

import json

import pytest

from trainer.config import DataConfig
from trainer.data.chat import ChatFormatError, row_limit, tokenize_chat
from trainer.data.sft_dataset import load_sft_splits
from trainer.tiny import build_tokenizer

TURNS = (
    '{% for m in messages %}{{ "<|im_start|>" + m["role"] + "\\n" + m["content"]'
    ' + "<|im_end|>\\n" }}{% endfor %}'
)
CHAT = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "It is 4."}]


def with_template(prompt: str):
    tokenizer = build_tokenizer()
    tokenizer.chat_template = TURNS + (
        "{% if add_generation_prompt %}{{ '" + prompt + "' }}{% endif %}"
    )
    return tokenizer


@pytest.mark.parametrize(
    "prompt",
    [
        "<|im_start|>assistant\\n<think>\\n",
        "<|im_start|>assistant\\nOkay, let me think step by step about it and then answer.",
    ],
)
def test_a_generation_prompt_the_turn_does_not_start_with_is_refused(prompt):
    tokenizer = with_template(prompt)
    with pytest.raises(ChatFormatError, match=r"generation prompt .* assistant turn 2"):
        tokenize_chat(tokenizer, CHAT, row_limit(tokenizer, "data.max_length", 256))


def test_a_matching_generation_prompt_trains_the_whole_turn():
    tokenizer = with_template("<|im_start|>assistant\\n")
    example = tokenize_chat(tokenizer, CHAT, row_limit(tokenizer, "data.max_length", 256))
    trained = [token for token, m in zip(example.input_ids, example.loss_mask) if m]
    assert tokenizer.decode(trained) == "It is 4.<|im_end|>\n"


def test_a_run_where_no_row_has_a_target_is_refused(tmp_path):
    """A template whose assistant turns render to the generation prompt alone (their
    content left out) trains nothing, as in verl, which masks the generation prompt: a run of
    such rows trained loss 0.0000, exit 0. Each row is refused, naming the turn whose
    content the template leaves out. (Such a turn was refused as one the generation prompt
    does not start.)"""
    tokenizer = build_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'assistant' %}<|im_start|>assistant\n"
        '{% else %}{{ "<|im_start|>" + m["role"] + "\\n" + m["content"] + "<|im_end|>\\n" }}'
        "{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"messages": CHAT}) + "\n")
    cfg = DataConfig(train_files=[str(path)], max_length=256)
    with pytest.raises(ChatFormatError, match=r"jsonl:1: turn 2, .* leaves out its content"):
        load_sft_splits(cfg, tokenizer, seed=0, progress=False)


@pytest.mark.parametrize(
    ("column", "value"), [("tools", [{"type": "function"}]), ("enable_thinking", False)]
)
def test_a_row_with_chat_template_arguments_is_refused_naming_the_column(tmp_path, column, value):
    """verl passes a row's tools / enable_thinking to the template; they were dropped."""
    path = tmp_path / "train.jsonl"
    rows = [{"messages": CHAT, column: None}, {"messages": CHAT, column: value}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    cfg = DataConfig(train_files=[str(path)], max_length=256)
    with pytest.raises(ChatFormatError, match=rf"jsonl:2: column '{column}' .* not supported"):
        load_sft_splits(cfg, build_tokenizer(), seed=0, progress=False)


@pytest.mark.parametrize("reply", ["\nIt is 4.", "\n\nIt is 4."])
def test_a_reply_whose_newline_merges_with_the_prompts_trains_after_the_prompt(reply):
    """ChatML's `assistant\\n` and a reply's leading newline are one token (`ĊĊ`), so the
    prompt's ids are no prefix of the turn's: a whole run was refused over one such row. The
    reply's tokens after the prompt's text are trained. (Qwen2.5's vocabulary merges them by
    BPE; this small one is given the pair as a token.)"""
    tokenizer = with_template("<|im_start|>assistant\\n")
    tokenizer.add_tokens(["\n\n"])
    chat = [CHAT[0], {"role": "assistant", "content": reply}]
    merged = tokenizer("assistant\n" + reply, add_special_tokens=False)["input_ids"]
    plain = tokenizer("assistant\n", add_special_tokens=False)["input_ids"]
    assert merged[: len(plain)] != plain  # the case: the newlines are one token here
    example = tokenize_chat(tokenizer, chat, row_limit(tokenizer, "data.max_length", 256))
    trained = [token for token, m in zip(example.input_ids, example.loss_mask) if m]
    # the reply's first newline lies in the token it shares with the prompt's
    assert tokenizer.decode(trained) == reply[1:] + "<|im_end|>\n"
