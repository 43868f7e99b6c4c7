"""Which mfsdp command takes a data table, told from a row's columns, for the error of a
command given a table it does not read.

Each command read the columns it needs and, missing them, listed the row's columns:
`train grpo` on an SFT table `mfsdp data` wrote said "no 'prompt' column (found
['extra_info', 'messages'])", on GSM8K's own file "(found ['answer', 'question'])", and
`data gsm8k` on an SFT messages file "column(s) ['question', 'answer'] missing". Each now
also says what the table is and the command that takes it, from this one table.
"""

from __future__ import annotations

from collections.abc import Collection

# What a table is, by the columns that mark it, first match wins (an RL table has a
# `prompt`, an SFT table may keep `extra_info`), and the command that reads or makes it.
_KINDS = (
    ("grpo", {"reward_model"}, "a verl RL table (prompts and rewards)"),
    ("sft", {"messages"}, "an SFT table (chat `messages`)"),
    ("gsm8k", {"question", "answer"}, "GSM8K's own rows (question, answer)"),
    ("math", {"problem", "solution"}, "MATH's own rows (problem, solution)"),
)
_TRAINERS = ("sft", "grpo")


def table_kind_hint(columns: Collection[str], reader: str) -> str:
    """`; <what the table is, and the command that takes it>` for a row holding `columns`
    that the command `reader` (`sft`, `grpo`: mfsdp train; `gsm8k`, `math`: mfsdp data)
    cannot read; "" when its columns mark no other kind of table."""
    for kind, marks, what in _KINDS:
        if kind == reader or not marks <= set(columns):
            continue
        if kind not in _TRAINERS:
            return f"; convert {what} with `mfsdp data {kind} --input FILE --out DIR`"
        if reader in _TRAINERS:
            return f"; {what}: `mfsdp train {kind}` reads it"
        return f"; already converted: {what}, which `mfsdp train {kind}` reads as it is"
    return ""
