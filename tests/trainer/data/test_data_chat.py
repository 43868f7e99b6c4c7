import json

import pytest

from trainer.config import DataConfig
from trainer.data.chat import (
    ChatColumns,
    ChatFormatError,
    Example,
    messages_of,
    row_limit,
    tokenize_chat,
    truncate,
)
from trainer.data.sft_dataset import load_sft_splits
from trainer.tiny import build_tokenizer

CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Tom has 3 apples and buys 4 more."},
    {"role": "assistant", "content": "Tom has 3 + 4 = 7 apples.\n#### 7"},
    {"role": "user", "content": "And 2 more?"},
    {"role": "assistant", "content": "#### 9"},
]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def limit(tokenizer):
    return row_limit(tokenizer, "data.max_length", 1024)


def assistant_text(tokenizer, example: Example) -> str:
    return tokenizer.decode([t for t, m in zip(example.input_ids, example.loss_mask) if m])


def test_loss_only_on_assistant_tokens_with_the_tiny_template(tokenizer):
    """Each assistant turn after its generation prompt, the newline after its
    `{% endgeneration %}` included, as verl's MultiTurnSFTDataset trains it."""
    example = tokenize_chat(tokenizer, CONVERSATION, limit(tokenizer))
    assert len(example.input_ids) == len(example.loss_mask)
    assert (
        assistant_text(tokenizer, example)
        == "Tom has 3 + 4 = 7 apples.\n#### 7<|im_end|>\n#### 9<|im_end|>\n"
    )
    full = tokenizer.decode(example.input_ids)
    assert (
        "Tom has 3 apples and buys" in full
        and "Tom has 3 apples and buys" not in assistant_text(tokenizer, example)
    )


def test_generation_markers_change_nothing(tokenizer):
    plain = build_tokenizer()
    plain.chat_template = plain.chat_template.replace("{% generation %}", "").replace(
        "{% endgeneration %}", ""
    )
    example = tokenize_chat(plain, CONVERSATION, limit(plain))
    reference = tokenize_chat(tokenizer, CONVERSATION, limit(tokenizer))
    assert example.input_ids == reference.input_ids
    assert example.loss_mask == reference.loss_mask
    assert (
        assistant_text(plain, example)
        == "Tom has 3 + 4 = 7 apples.\n#### 7<|im_end|>\n#### 9<|im_end|>\n"
    )


def test_templates_that_do_not_render_prefix_by_prefix_are_refused(tokenizer):
    odd = build_tokenizer()
    odd.chat_template = (
        "{% for m in messages %}{{ m['content'] }}{% endfor %}{{ messages | length }}"
    )
    with pytest.raises(ChatFormatError, match="prefix"):
        tokenize_chat(odd, CONVERSATION, limit(odd))


def test_prompt_response_columns_and_bad_rows():
    columns = ChatColumns()
    assert messages_of({"prompt": "2+2?", "response": "4"}, columns) == [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ]
    turns = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    assert messages_of({"prompt": turns, "response": "a"}, columns)[:2] == turns
    with pytest.raises(ChatFormatError, match=r"no 'messages' column .* \(found: text\); to read"):
        messages_of({"text": "x"}, columns)
    with pytest.raises(ChatFormatError, match=r"\(found: question, answer\); .*; convert GSM8K's"):
        messages_of({"question": "1+1", "answer": "#### 2"}, columns)
    with pytest.raises(ChatFormatError, match="no assistant turn"):
        messages_of({"messages": [{"role": "user", "content": "q"}]}, columns)


VERL_GSM8K_ROW = {  # a row of verl's examples/data_preprocess/gsm8k.py output
    "data_source": "openai/gsm8k",
    "prompt": [{"role": "user", "content": "What is 2+2? Let's think step by step."}],
    "extra_info": {"split": "train", "index": 0, "question": "What is 2+2?", "answer": "#### 4"},
}


def test_struct_fields_as_verl_prompt_and_response_dict_keys_read_them():
    columns = ChatColumns(
        prompt="extra_info",
        response="extra_info",
        prompt_fields=("question",),
        response_fields=("answer",),
    )
    assert messages_of(VERL_GSM8K_ROW, columns) == [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "#### 4"},
    ]
    nested = {"q": {"a": {"b": "deep"}}, "r": "7"}
    assert messages_of(nested, ChatColumns(prompt="q", response="r", prompt_fields=("a", "b")))[
        0
    ] == {"role": "user", "content": "deep"}


@pytest.mark.parametrize(
    ("columns", "message"),
    [  # a struct was trained on as its Python repr: "{'split': 'train', ...}"
        (
            ChatColumns(prompt="extra_info", response="extra_info"),
            r"the prompt is a struct \(fields: split, index, question, answer\): name the field"
            r" to read in data.prompt_dict_keys",
        ),
        (
            ChatColumns(prompt="extra_info", response="extra_info", prompt_fields=("question",)),
            r"the response is a struct .*data.response_dict_keys",
        ),
        (
            ChatColumns(prompt="extra_info", response="extra_info", prompt_fields=("questions",)),
            r"'extra_info' has no field 'questions' \(its fields: split, index, question, answer\)",
        ),
        (
            ChatColumns(
                prompt="extra_info",
                response="extra_info",
                prompt_fields=("question", "text"),
                response_fields=("answer",),
            ),
            r"'extra_info.question' is a str, not a struct with a field 'text'",
        ),
        (
            ChatColumns(prompt="prompt", response="prompt"),
            r"the response \('prompt'\) is a list, not text",
        ),
    ],
)
def test_a_struct_or_list_where_text_belongs_is_refused_naming_the_field(columns, message):
    with pytest.raises(ChatFormatError, match=message):
        messages_of(VERL_GSM8K_ROW, columns)


def test_truncation_modes():
    example = Example(list(range(10)), [0] * 6 + [1] * 4)
    assert truncate(example, 10, "error", "row 0") is example
    left = truncate(example, 4, "left", "row 0")
    right = truncate(example, 4, "right", "row 0")
    assert (left.input_ids, left.loss_mask) == ([6, 7, 8, 9], [1, 1, 1, 1])
    assert (right.input_ids, right.loss_mask) == ([0, 1, 2, 3], [0, 0, 0, 0])
    with pytest.raises(ChatFormatError, match=r"train.jsonl row 3: 10 tokens > data.max_length=4"):
        truncate(example, 4, "error", "train.jsonl row 3")


def test_dataset_errors_name_file_and_row(tmp_path, tokenizer):
    path = tmp_path / "train.jsonl"
    path.write_text(
        '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}\n'
        '{"messages": [{"role": "user", "content": "q"}]}\n'
    )
    with pytest.raises(
        ChatFormatError, match=r"train.jsonl:2: the conversation has no assistant turn"
    ):
        load_sft_splits(DataConfig(train_files=[str(path)]), tokenizer, seed=0, progress=False)


HUGE = ', "n": ' + "9" * 5000  # past Python's 4300-digit limit: json raises a ValueError


def _chat_row(question: str = "q", extra: str = "") -> str:
    """One chat row as JSON text, `question` and `extra` (more fields) written in as given."""
    user = '{"role": "user", "content": "' + question + '"}'
    return '{"messages": [' + user + ', {"role": "assistant", "content": "a"}]' + extra + "}"


@pytest.mark.parametrize(
    "name, text, says",
    [
        (
            "train.jsonl",
            _chat_row() + "\n" + _chat_row(extra=HUGE) + "\n",
            "train.jsonl:2: not valid JSON (an integer of more than 4300 digits)",
        ),
        (
            "train.json",
            "[" + _chat_row() + ",\n " + _chat_row(extra=HUGE) + "]",
            "train.json:2: not valid JSON (an integer of more than 4300 digits)",
        ),
        (
            "train.jsonl",
            _chat_row() + "\n" + _chat_row(r"q\ud800") + "\n",
            r"train.jsonl:2: messages[0].content holds '\ud800' at character 1, a lone UTF-16"
            r" surrogate (half of a \u escape pair), which is no text",
        ),
        (
            "train.json",
            "[" + _chat_row() + ", " + _chat_row(r"q\udc00") + "]",
            r"train.json row 2: messages[0].content holds '\udc00' at character 1, a lone"
            r" UTF-16 surrogate (half of a \u escape pair), which is no text",
        ),
    ],
    ids=["huge-int-jsonl", "huge-int-json", "surrogate-jsonl", "surrogate-json"],
)
def test_a_row_json_cannot_hold_as_text_is_refused_as_it_is_read(
    tmp_path, tokenizer, name, text, says
):
    """A 5000-digit integer was a ValueError traceback; a lone surrogate (`"\\ud800"` in the
    file) was blamed on the chat template ("cannot render it (TypeError ...)"), and `mfsdp
    data` died in pyarrow. Both name the file and its line (or row) as the file is read."""
    from trainer.data.files import DataFileError

    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DataFileError) as caught:
        load_sft_splits(DataConfig(train_files=[str(path)]), tokenizer, seed=0, progress=False)
    assert str(caught.value) == f"{tmp_path}/{says}"


def test_surrogate_pairs_and_escaped_backslashes_are_text(tmp_path):
    """Only a lone surrogate is refused: a pair is one character (an emoji), and `\\ud800`
    is a backslash and five letters."""
    from tests.support.data_tables import read_rows

    path = tmp_path / "train.jsonl"
    path.write_text(r'{"prompt": "\ud83d\ude00 \\ud800", "response": "a"}' + "\n")
    assert read_rows([str(path)]) == [{"prompt": "\U0001f600 \\ud800", "response": "a"}]


def test_validation_split_is_seeded_and_disjoint(tmp_path, tokenizer):
    from tests.support.sft import write_chat_jsonl

    path = write_chat_jsonl(tmp_path / "train.jsonl", rows=20)
    cfg = DataConfig(train_files=[str(path)], val_ratio=0.25)
    train, val = load_sft_splits(cfg, tokenizer, seed=5, progress=False)
    _again, val_again = load_sft_splits(cfg, tokenizer, seed=5, progress=False)
    assert (len(train), len(val)) == (15, 5)
    assert [e.input_ids for e in val] == [e.input_ids for e in val_again]
    assert not {tuple(e.input_ids) for e in val} & {tuple(e.input_ids) for e in train}


def _rows_with_a_bad_one(path, count: int, bad: int) -> None:
    rows = [{"prompt": f"q{i}", "response": None if i == bad else f"a{i}"} for i in range(count)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.mark.parametrize("val_ratio", [0.0, 0.1, 0.5])
def test_a_bad_row_is_named_by_its_file_and_row_wherever_the_split_puts_it(
    val_ratio, tmp_path, tokenizer
):
    """Was `row 4` (its place in the training split) or `validation split row 2`; a jsonl
    row is named by its line."""
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _rows_with_a_bad_one(first, 30, bad=-1)
    _rows_with_a_bad_one(second, 40, bad=5)
    cfg = DataConfig(train_files=[str(first), str(second)], val_ratio=val_ratio)
    with pytest.raises(ChatFormatError, match=rf"^{second}:6: the response \('response'\)"):
        load_sft_splits(cfg, tokenizer, seed=3, progress=False)


def test_a_bad_rl_row_is_named_by_its_file_and_row(tmp_path, tokenizer):
    from trainer.grpo.config import RLDataConfig
    from trainer.grpo.data import RLDataError, load_rl_prompts

    good = {
        "prompt": [{"role": "user", "content": "q"}],
        "data_source": "openai/gsm8k",
        "reward_model": {"ground_truth": "1"},
    }
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(json.dumps(good) + "\n")
    second.write_text(json.dumps(good) + "\n" + json.dumps({"prompt": "q"}) + "\n")
    with pytest.raises(RLDataError, match=rf"^{second}:2: no reward_model.ground_truth"):
        load_rl_prompts([str(first), str(second)], RLDataConfig(), tokenizer)


def test_a_missing_value_is_refused_not_trained_as_text():
    """A NaN (pandas' missing value) was trained on as the text "nan"."""
    with pytest.raises(ChatFormatError, match=r"the response \('response'\) is nan, a missing"):
        messages_of({"prompt": "q", "response": float("nan")}, ChatColumns())


def test_a_parquet_column_given_twice_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.support.data_tables import read_rows
    from trainer.data.files import DataFileError

    table = pa.Table.from_arrays(
        [pa.array(["p"]), pa.array(["GOOD"]), pa.array(["BAD"])],
        names=["prompt", "response", "response"],
    )
    pq.write_table(table, tmp_path / "twice.parquet")
    with pytest.raises(DataFileError, match="column 'response' appears 2 times"):
        read_rows(tmp_path / "twice.parquet")


def test_rows_truncation_leaves_without_a_target_are_named(tmp_path, tokenizer, caplog):
    """Every row's answer cut off trained 3 steps of loss 0.0000, exit 0."""
    path = tmp_path / "train.jsonl"
    long_prompt = "word " * 60
    rows = [{"prompt": long_prompt, "response": "a"}, {"prompt": "q", "response": "a"}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    cfg = DataConfig(train_files=[str(path)], max_length=24, truncation="right")
    with caplog.at_level("WARNING", logger="mfsdp.data"):
        train, _ = load_sft_splits(cfg, tokenizer, seed=0, progress=False)
    assert len(train) == 2 and train[0].num_targets == 0 and train[1].num_targets > 0
    assert f"{path}:1 keeps no response token after data.truncation=right" in caplog.text
    path.write_text(json.dumps(rows[0]) + "\n")
    with pytest.raises(ChatFormatError, match=r"jsonl:1: keeps no response token .* every other"):
        load_sft_splits(cfg, tokenizer, seed=0, progress=False)


@pytest.mark.parametrize(
    ("role", "meant"), [("User", "user"), ("human", "user"), ("gpt", "assistant")]
)
def test_another_spelling_of_a_role_is_refused_naming_the_one_meant(role, meant):
    """Rendered as text by the template, and an `Assistant` turn was never a target."""
    turns = [{"role": role, "content": "q"}, {"role": "assistant", "content": "a"}]
    with pytest.raises(ChatFormatError, match=rf"role '{role}': .* write '{meant}'"):
        messages_of({"messages": turns}, ChatColumns())
