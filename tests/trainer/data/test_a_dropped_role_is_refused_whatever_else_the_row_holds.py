"""A turn of a role the chat template renders nowhere (Qwen's `function`) was let through
where anything else in the row changed the text: a Qwen3 reply holding `<think>` (reshaped
by the template) or an answer quoting the tool's result. The turn was left out of the
training text and the model learned to make the result up. Such a turn is refused whatever
the rest of the row holds, in messages rows, prompt/response rows and GRPO prompts; a role
the template renders, merged elsewhere (a Gemma-style system turn) or passed through tojson
(Llama-3.1's ipython), still trains."""

from __future__ import annotations

import json

import pytest

from tests.support.real_chat_templates import qwen_tokenizer
from trainer.config import DataConfig
from trainer.data.chat import ChatFormatError, dropped_turns, row_limit
from trainer.data.sft_dataset import tokenize_rows
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import RLDataError, load_rl_prompts
from trainer.tiny import build_tokenizer

FUNCTION = {"role": "function", "name": "get_balance", "content": '{"balance": 1234}'}
USER = {"role": "user", "content": "balance?"}

# Gemma-3's shape: a system turn merged into the first user turn, roles made to alternate
GEMMA_STYLE = (
    "{%- if messages[0]['role'] == 'system' -%}{%- set first = messages[0]['content'] + '\\n\\n'"
    " -%}{%- set turns = messages[1:] -%}{%- else -%}{%- set first = '' -%}{%- set turns ="
    " messages -%}{%- endif -%}{%- for m in turns -%}{%- if (m['role'] == 'user') != (loop.index0"
    " % 2 == 0) -%}{{ raise_exception('Conversation roles must alternate') }}{%- endif -%}"
    "{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' else m['role']) + '\\n' +"
    " (first if loop.first else '') + m['content'] | trim + '<end_of_turn>\\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)
# Llama-3.1's shape: an ipython turn's content passed through tojson
LLAMA_STYLE = (
    "{%- for m in messages -%}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' }}"
    "{%- if m['role'] == 'ipython' -%}{{ m['content'] | tojson }}{%- else -%}"
    "{{ m['content'] | trim }}{%- endif -%}{{ '<|eot_id|>' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif -%}"
)


def tokenized(tokenizer, rows: list[dict], **data):
    return tokenize_rows(
        rows, DataConfig(max_length=1024, **data), tokenizer, lambda i: f"t.jsonl:{i + 1}", False
    )


def refused(tokenizer, rows: list[dict], **data) -> str:
    with pytest.raises(ChatFormatError) as err:
        tokenized(tokenizer, rows, **data)
    return str(err.value)


@pytest.mark.parametrize(
    ("template", "result", "reply"),
    [
        # the template reshapes the reply
        ("qwen3", FUNCTION["content"], "<think>look it up</think>It is 1234."),
        # the reply quotes the result
        ("qwen2_5_instruct", "1234", "Your balance is 1234."),
        ("qwen3", "1234", "Your balance is 1234."),
    ],
)
def test_a_dropped_turn_in_a_messages_row_is_refused(template, result, reply):
    function = {**FUNCTION, "content": result}
    rows = [{"messages": [USER, function, {"role": "assistant", "content": reply}]}]
    line = refused(qwen_tokenizer(template), rows)
    assert "t.jsonl:1" in line and "turn 2, role 'function': " in line, line
    assert "does not render it" in line and "\n" not in line


def test_a_dropped_turn_in_a_prompt_with_a_reshaped_reply_is_refused():
    prompt = [USER, {"role": "assistant", "content": "<think>hm</think>Let me check."}, FUNCTION]
    row = {"prompt": prompt, "response": "It is 1234."}
    line = refused(qwen_tokenizer("qwen3"), [row], chat_columns="prompt_response")
    assert "turn 3, role 'function'" in line and "does not render it" in line


@pytest.mark.parametrize("history", ["Let me check.", "<think>hm</think>Let me check."])
def test_a_dropped_turn_in_a_grpo_prompt_is_refused(tmp_path, history):
    prompt = [
        USER,
        {"role": "assistant", "content": history},
        FUNCTION,
        {"role": "user", "content": "and now?"},
    ]
    path = tmp_path / "rl.jsonl"
    path.write_text(
        json.dumps(
            {
                "prompt": prompt,
                "reward_model": {"ground_truth": "1234", "style": "rule"},
                "data_source": "openai/gsm8k",
            }
        )
        + "\n"
    )
    with pytest.raises(RLDataError) as err:
        load_rl_prompts([str(path)], RLDataConfig(max_prompt_length=512), qwen_tokenizer("qwen3"))
    line = str(err.value)
    assert line.startswith(f"{path}:1: ") and "turn 3, role 'function'" in line, line


def tiny(template: str):
    tokenizer = build_tokenizer()
    tokenizer.chat_template = template
    return tokenizer


def test_roles_a_template_renders_elsewhere_or_reshaped_train():
    gemma = tiny(GEMMA_STYLE)
    system = {"role": "system", "content": "Be brief."}
    rows = [{"messages": [system, USER, {"role": "assistant", "content": "It is 1234."}]}]
    assert "Be brief." in gemma.decode(tokenized(gemma, rows)[0].input_ids)
    llama = tiny(LLAMA_STYLE)
    result = {"role": "ipython", "content": 'say "1234"\nnow'}
    rows = [{"messages": [USER, result, {"role": "assistant", "content": "It is 1234."}]}]
    assert "1234" in llama.decode(tokenized(llama, rows)[0].input_ids)


def test_the_probe_tells_dropped_rendered_and_unknown_roles_apart():
    """The turn a template renders nowhere is told dropped, one it renders (merged into
    another turn, too) is not, and None where it raises on the probe (the row's own render
    decides); asked anew when the template changes."""
    tokenizer = qwen_tokenizer("qwen2_5_instruct")
    limit = row_limit(tokenizer, "data.max_length", 16)
    reply = {"role": "assistant", "content": "It is 1234."}
    assert dropped_turns(tokenizer, [USER, FUNCTION, reply], limit) == (1,)
    assert dropped_turns(tokenizer, [USER, {**FUNCTION, "role": "tool"}, reply], limit) == ()
    tokenizer.chat_template = GEMMA_STYLE
    system = {"role": "system", "content": "Be brief."}
    assert dropped_turns(tokenizer, [system, USER, reply], limit) == ()
    assert dropped_turns(tokenizer, [USER, FUNCTION, reply], limit) is None
