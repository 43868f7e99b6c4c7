"""Where a row keeps its chat (`ChatColumns`), and, for a row without one there, why
(`no_chat_columns`).

A row's chat is its messages column or its prompt and response columns; `data.chat_columns`
may read one kind only (trainer/data/chat_source.py). A row refused for lacking that kind
was told it had neither: "no 'messages' column and no 'prompt'/'response' columns (found:
prompt, response)", a row holding exactly the columns it said were missing, with advice to
rename keys that could not help. The refusal says which kind the setting reads, that the
row holds the other, and the setting that trains it. A cell that is null (a parquet file
gives every row every column) holds nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainer.data.table_kinds import sft_keys_hint, table_kind_hint

AUTO, MESSAGES, PROMPT_RESPONSE = "auto", "messages", "prompt_response"


@dataclass(frozen=True)
class ChatColumns:
    """Where a row keeps its chat: verl's `messages` column, else a prompt and a response
    column, each reached through the struct fields verl's `prompt_dict_keys` /
    `response_dict_keys` name (its GSM8K SFT example reads `extra_info.question` and
    `extra_info.answer`)."""

    messages: str = "messages"
    prompt: str = "prompt"
    response: str = "response"
    prompt_fields: tuple[str, ...] = ()
    response_fields: tuple[str, ...] = ()
    # `messages` or `prompt_response`: only those columns; `auto`: messages where a row has
    # them (trainer/data/chat_source.py)
    source: str = AUTO
    # the setting that made `source` one kind, as given (`data.chat_columns=messages`,
    # `data.prompt_key=question`), and the one that trains a row holding the other kind
    picked_by: str = ""
    remedy: str = ""

    def kind(self, source: str) -> tuple[str, ...]:
        """The columns of `source` (`messages` or `prompt_response`), each named once (verl's
        GSM8K SFT example reads its prompt and response from one column)."""
        kind = (self.messages,) if source == MESSAGES else (self.prompt, self.response)
        return tuple(dict.fromkeys(kind))


def holds(row: dict[str, Any], columns: Sequence[str]) -> bool:
    """Whether `row` has a value (not null) in each of `columns`."""
    return all(row.get(column) is not None for column in columns)


def no_chat_columns(row: dict[str, Any], columns: ChatColumns) -> str:
    """Why `row` has no chat in the columns `columns` reads: the columns it lacks, which kind
    the setting reads and, where the row holds the other kind, the setting that trains it
    (`other_kind`); else the columns it has and the keys or command that read such a
    table."""
    if columns.source == AUTO:  # as a row lacking either kind was always told it
        messages, prompt_response = columns.kind(MESSAGES), columns.kind(PROMPT_RESPONSE)
        said = f"no {_named(messages)} column and no {_named(prompt_response)} columns"
    else:
        chosen = columns.kind(columns.source)
        said = f"{_lacking(row, chosen)} ({columns.picked_by} reads only {_named(chosen)})"
        if holds(row, _other(columns)):
            return f"{said}; the row holds {_named(_other(columns))}: {columns.remedy}"
    found = ", ".join(map(str, list(row)[:8])) or "none"
    return (
        f"{said} (found: {found}){sft_keys_hint(row, columns.source)}{table_kind_hint(row, 'sft')}"
    )


def other_kind(row: dict[str, Any], columns: ChatColumns) -> str:
    """`; <the setting> reads only <its kind>, and the row holds <the other>: <remedy>` for
    a row (whole, every column of its file) refused for a null cell of the kind
    `data.chat_columns` reads, that holds the other kind; else ""."""
    chosen = columns.kind(columns.source) if columns.source != AUTO else ()
    if not chosen or holds(row, chosen) or not holds(row, _other(columns)):
        return ""
    return (
        f"; {columns.picked_by} reads only {_named(chosen)}, and the"
        f" row holds {_named(_other(columns))}: {columns.remedy}"
    )


def _other(columns: ChatColumns) -> tuple[str, ...]:
    """The columns of the kind `columns.source` does not read."""
    return columns.kind(PROMPT_RESPONSE if columns.source == MESSAGES else MESSAGES)


def _named(kind: Sequence[str]) -> str:
    """`'messages'`, `'prompt'/'response'`."""
    return "/".join(f"'{column}'" for column in kind)


def _lacking(row: dict[str, Any], kind: Sequence[str]) -> str:
    """The columns of `kind` that `row` has not: `no 'messages' column`, `no
    'prompt'/'response' columns`, `no 'response' column beside 'prompt'`."""
    absent = [column for column in kind if column not in row]
    if len(absent) == len(kind):
        return f"no {_named(kind)} column{'s' if len(kind) > 1 else ''}"
    present = [column for column in kind if column in row]
    return f"no {_named(absent)} column beside {_named(present)}"
