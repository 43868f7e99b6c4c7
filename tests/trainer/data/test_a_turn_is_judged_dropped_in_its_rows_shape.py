"""Mistral-v0.3's chat template (Mistral-Small's and Ministral's alike) writes the system
turn into the last turn only where that is a user turn. A probe of two fixed layouts, each
ending with a reply, judged system never rendered, and GRPO `[system, user]` prompts and
prompt/response rows with a system turn, which render it, were refused. A turn is judged in
a chat of its row's shape: those train, a messages row ending with a reply (which does lose
the system turn) is still refused, and a file of one shape costs one probe render."""

from __future__ import annotations

import json

import pytest

import trainer.data.chat as chat
from trainer.config import DataConfig
from trainer.data.chat import ChatFormatError, dropped_turns, row_limit, tokenize_prompt_response
from trainer.data.sft_dataset import tokenize_rows
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import load_rl_prompts
from trainer.tiny import build_tokenizer

# Mistral-7B-Instruct-v0.3's template, its tool branches left out
MISTRAL_V03 = (
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
    "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}"
    "{%- endif %}{%- set ns = namespace() %}{%- set ns.index = 0 %}"
    "{%- for message in loop_messages %}"
    "{%- if (message['role'] == 'user') != (ns.index % 2 == 0) %}"
    "{{- raise_exception('After the optional system message, conversation roles must"
    " alternate user/assistant/user/assistant/...') }}{%- endif %}"
    "{%- set ns.index = ns.index + 1 %}{%- endfor %}{{- bos_token }}"
    "{%- for message in loop_messages %}{%- if message['role'] == 'user' %}"
    "{%- if loop.last and system_message is defined %}"
    "{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/INST]' }}"
    "{%- else %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}"
    "{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content']|trim + eos_token }}"
    "{%- else %}{{- raise_exception('Only user and assistant roles are supported, with the"
    " exception of an initial optional system message!') }}{%- endif %}{%- endfor %}"
)
SYSTEM = {"role": "system", "content": "Answer in a box."}


@pytest.fixture(scope="module")
def mistral():
    tokenizer = build_tokenizer()
    tokenizer.chat_template = MISTRAL_V03
    return tokenizer


def prompt(number: int) -> list[dict]:
    return [{**SYSTEM, "content": f"Answer in box {number}."}, {"role": "user", "content": "2+2?"}]


def test_a_grpo_prompt_with_a_system_turn_loads(mistral, tmp_path):
    path = tmp_path / "rl.jsonl"
    row = {
        "prompt": [SYSTEM, {"role": "user", "content": "2+2?"}],
        "reward_model": {"ground_truth": "4", "style": "rule"},
        "data_source": "openai/gsm8k",
    }
    path.write_text(json.dumps(row) + "\n")
    table, _ = load_rl_prompts([str(path)], RLDataConfig(max_prompt_length=512), mistral)
    assert len(table) == 1


def test_a_prompt_response_row_with_a_system_turn_trains_it(mistral):
    row = {"prompt": prompt(1), "response": "4"}
    (example,) = tokenize_rows(
        [row],
        DataConfig(max_length=512, chat_columns="prompt_response"),
        mistral,
        lambda i: f"t.jsonl:{i + 1}",
        False,
    )
    assert "Answer in box 1.\n\n2+2?[/INST]4" in mistral.decode(example.input_ids)


def test_a_messages_row_ending_with_a_reply_still_refuses_the_dropped_system_turn(mistral):
    row = {"messages": [*prompt(1), {"role": "assistant", "content": "4"}]}
    with pytest.raises(ChatFormatError) as err:
        tokenize_rows(
            [row], DataConfig(max_length=512), mistral, lambda i: f"t.jsonl:{i + 1}", False
        )
    line = str(err.value)
    assert line.startswith("t.jsonl:1: ") and "turn 1, role 'system'" in line, line
    assert "does not render it" in line and "\n" not in line


def test_rows_of_one_shape_cost_one_probe_render(monkeypatch):
    renders = []
    real = chat._rendered

    def counted(*args, **kwargs):
        renders.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(chat, "_rendered", counted)
    fresh = build_tokenizer()  # no answer kept from another test
    fresh.chat_template = MISTRAL_V03
    limit = row_limit(fresh, "data.max_length", 512)
    for number in range(3000):
        tokenize_prompt_response(fresh, prompt(number), "4", limit)
    assert len(renders) - 3000 <= 3, len(renders)


def test_shapes_past_the_bound_are_probed_uncached(mistral, monkeypatch):
    monkeypatch.setattr(chat, "_SHAPES_KEPT", 2)
    limit = row_limit(mistral, "data.max_length", 512)
    chat._PROBES.pop(mistral, None)
    reply = {"role": "assistant", "content": "4"}
    chats = [prompt(1), [*prompt(1), reply], [*prompt(1), reply, *prompt(2)[1:]]]
    answers = [dropped_turns(mistral, turns, limit, True) for turns in chats]
    assert answers == [(), (0,), ()] and len(chat._PROBES[mistral]) == 2
    assert dropped_turns(mistral, chats[2], limit, True) == ()
