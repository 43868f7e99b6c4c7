"""A turn whose `tool_calls` the chat template does not render is refused, naming the row.

Every key of a turn reaches the template, as verl passes it; the tiny model's template
renders role and content alone, so an assistant turn that called a tool trained as an empty
reply, the call left out (`<|im_end|>` its only target), and exit 0. Other keys a template
ignores (`name`, `id`) are left to it, as verl leaves them.
"""

import json

import pytest

from trainer.config import DataConfig
from trainer.data.chat import ChatFormatError
from trainer.data.sft_dataset import load_sft_splits
from trainer.grpo.config import RLDataConfig
from trainer.grpo.data import RLDataError, load_rl_prompts
from trainer.tiny import build_tokenizer

CALL = {"type": "function", "function": {"name": "weather", "arguments": {"city": "Oslo"}}}
CHAT = [
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "content": "rain"},
    {"role": "assistant", "content": "It rains."},
]
REFUSED = r"'assistant' turn with tool_calls: the chat template .*does not render them"


@pytest.fixture(params=["marked", "by prefixes"])
def tokenizer(request):
    """The tiny model's template, with its `{% generation %}` blocks or without them (which
    train the same tokens: the blocks decide nothing)."""
    tokenizer = build_tokenizer()
    if request.param == "by prefixes":
        template = tokenizer.chat_template.replace("{% generation %}", "")
        tokenizer.chat_template = template.replace("{% endgeneration %}", "")
    return tokenizer


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def sft_rows(tokenizer, path, chats):
    files = [write_jsonl(path, [{"messages": chat} for chat in chats])]
    train, _ = load_sft_splits(DataConfig(train_files=files), tokenizer, 0, False)
    return train


def test_an_sft_turn_whose_tool_calls_are_not_rendered_is_refused_naming_the_row(
    tokenizer, tmp_path
):
    path = tmp_path / "tc.jsonl"
    plain = [CHAT[0], {"role": "assistant", "content": "ask"}]
    with pytest.raises(ChatFormatError, match=rf"^{path}:2: {REFUSED}"):
        sft_rows(tokenizer, path, [plain, CHAT])


def test_a_grpo_prompt_turn_whose_tool_calls_are_not_rendered_is_refused_naming_the_row(
    tokenizer, tmp_path
):
    prompt = [*CHAT[:3], {"role": "user", "content": "and tomorrow?"}]
    row = {"prompt": prompt, "reward_model": {"ground_truth": "7"}}
    files = [write_jsonl(tmp_path / "rl.jsonl", [row])]
    with pytest.raises(RLDataError, match=rf"^{files[0]}:1: {REFUSED}"):
        load_rl_prompts(files, RLDataConfig(), tokenizer, custom_reward=True)


def test_other_keys_the_template_ignores_and_empty_tool_calls_train(tokenizer, tmp_path):
    chat = [
        {"role": "user", "content": "weather?", "name": "ann", "id": 3},
        {"role": "assistant", "content": "Rain.", "tool_calls": []},
    ]
    (example,) = sft_rows(tokenizer, tmp_path / "ok.jsonl", [chat])
    assert example.num_targets > 0


def test_a_row_of_many_tool_calls_costs_no_render_more(tmp_path, monkeypatch):
    """A render per calling turn made a row of dozens of calls cost dozens of renders more
    than the row without them; the calls are judged in the probe of the row's shape, once
    per template and shape, so a row of them costs no render more than the row without."""
    import trainer.data.chat as chat

    tokenizer = build_tokenizer()
    tokenizer.chat_template = tokenizer.chat_template.replace(
        "{{ message['content'] + '<|im_end|>' }}",
        "{{ message['content'] }}{% if message['tool_calls'] %}"
        "{{ message['tool_calls'][0]['function']['name'] }}"
        "{{ message['tool_calls'][0]['function']['arguments'] | tojson }}{% endif %}"
        "{{ '<|im_end|>' }}",
    )
    calls = [CHAT[0]]
    for _ in range(12):
        calls += [CHAT[1], CHAT[2]]
    calls.append(CHAT[3])
    renders = []
    real = chat.chat_ids

    def counted(*args, **kwargs):
        renders.append(1)
        return real(*args, **kwargs)

    uncalled = [
        {key: value for key, value in turn.items() if key != "tool_calls"} for turn in calls
    ]
    # the template's prompts and its probe of each shape of chat, once
    sft_rows(tokenizer, tmp_path / "first.jsonl", [uncalled, calls])
    monkeypatch.setattr(chat, "chat_ids", counted)
    sft_rows(tokenizer, tmp_path / "none.jsonl", [uncalled])
    without = len(renders)
    (row,) = sft_rows(tokenizer, tmp_path / "many.jsonl", [calls])
    assert len(renders) - without == without and "weather" in tokenizer.decode(row.input_ids)
