"""Which mfsdp command takes a data table, told from a row's columns, for the error of a
command given a table it does not read; and for `train sft`, the data keys that read the
table's own columns as they are.

Each command read the columns it needs and, missing them, listed the row's columns:
`train grpo` on an SFT table `mfsdp data` wrote said "no 'prompt' column (found
['extra_info', 'messages'])", on GSM8K's own file "(found ['answer', 'question'])", and
`data gsm8k` on an SFT messages file "column(s) ['question', 'answer'] missing". Each now
also says what the table is and the command that takes it, from this one table. A
question/answer table is GSM8K's own only where its answer holds the `#### <number>` that
`mfsdp data gsm8k` reads (any other was sent to a converter that refused it), and `train sft`
names its prompt/response keys, which read any such table as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from trainer.data.ground_truths import gsm8k_ground_truth, math_ground_truth

# What a table is, by the columns that mark it, first match wins (an RL table has a
# `prompt`, an SFT table may keep `extra_info`), and the command that reads or makes it. A
# dataset's own rows are marked by (prompt column, response column).
_KINDS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("grpo", ("reward_model",), "a verl RL table (prompts and rewards)"),
    ("sft", ("messages",), "an SFT table (chat `messages`)"),
    ("gsm8k", ("question", "answer"), "GSM8K's own rows (question, answer)"),
    ("math", ("problem", "solution"), "MATH's own rows (problem, solution)"),
)
_TRAINERS = ("sft", "grpo")
# What `mfsdp data <kind>` reads of a row's response column, raising ValueError where it
# cannot convert the row
_CONVERTED: dict[str, Callable[[str], str]] = {
    "gsm8k": gsm8k_ground_truth,
    "math": math_ground_truth,
}
# verl's SFT form of its own RL tables (examples/sft/gsm8k): the question and answer that
# verl's preprocessing keeps in extra_info, read through prompt/response_dict_keys
_VERL_SFT_FIELDS = ("question", "answer")


def table_kind_hint(row: Mapping[str, Any], reader: str) -> str:
    """`; <what the table is, and the command that takes it>` for a row that the command
    `reader` (`sft`, `grpo`: mfsdp train; `gsm8k`, `math`: mfsdp data) cannot read; "" when
    its columns mark no other kind of table."""
    for kind, marks, what in _KINDS:
        if kind == reader or not _is_kind(row, kind, marks):
            continue
        if kind not in _TRAINERS:
            return f"; convert {what} with `mfsdp data {kind} --input FILE --out DIR`"
        if reader in _TRAINERS:
            return f"; {what}: `mfsdp train {kind}` reads it"
        return f"; already converted: {what}, which `mfsdp train {kind}` reads as it is"
    return ""


def sft_keys_hint(row: Mapping[str, Any], source: str = "auto") -> str:
    """`; <the data keys that train SFT on the row's own columns>`, for a row with none of the
    columns `train sft` reads: verl's SFT form of its RL table (extra_info's question and
    answer), a dataset's prompt and response columns by name, else the keys in general. An
    RL table without those fields holds no responses to learn: "" (`train grpo` reads it).
    Where `data.chat_columns` (`source`) reads one kind of columns only, keys of the other
    kind come with the setting that reads them: alone they were read by nothing."""
    prompt_response = " data.chat_columns=prompt_response" if source == "messages" else ""
    messages = " data.chat_columns=messages" if source == "prompt_response" else ""
    if "reward_model" in row:
        extra = row.get("extra_info")
        if not isinstance(extra, Mapping) or not all(
            isinstance(extra.get(name), str) for name in _VERL_SFT_FIELDS
        ):
            return ""
        prompt, response = _VERL_SFT_FIELDS
        return (
            "; SFT on its extra_info, as verl's SFT example reads this table:"
            " data.prompt_key=extra_info data.response_key=extra_info"
            f" data.prompt_dict_keys=[{prompt}] data.response_dict_keys=[{response}]"
            f"{prompt_response}"
        )
    for _, marks, _ in _KINDS:
        if len(marks) == 2 and set(marks) <= set(row):
            prompt, response = marks
            return (
                f"; to train on these columns as they are:"
                f" data.prompt_key={prompt} data.response_key={response}{prompt_response}"
            )
    return (
        f"; to read other columns: data.prompt_key=COL data.response_key=COL{prompt_response},"
        f" or data.messages_key=COL{messages} for a column of chat turns"
    )


def _is_kind(row: Mapping[str, Any], kind: str, marks: tuple[str, ...]) -> bool:
    """Whether `row` has `kind`'s columns and, for a dataset `mfsdp data` converts, a response
    it converts."""
    if not set(marks) <= set(row):
        return False
    convert = _CONVERTED.get(kind)
    if convert is None:
        return True
    response = row[marks[-1]]
    if not isinstance(response, str):
        return False
    try:
        convert(response)
    except ValueError:
        return False
    return True
