"""verl's MultiTurnSFTDataset loss mask, written from its code, for tests to compare with:
verl/utils/dataset/multiturn_sft_dataset.py (`__getitem__`, `_process_single_message`,
`sanity_check`) and verl/utils/chat_template.py (`extract_system_prompt_and_generation`)."""

from __future__ import annotations

from typing import Any


def _ids(tokenizer: Any, messages: list[dict], add_generation_prompt: bool) -> list[int]:
    rendered = tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=True
    )
    return list(rendered["input_ids"])


def verl_row(tokenizer: Any, messages: list[dict]) -> tuple[list[int], list[int]]:
    """(input_ids, loss_mask) of a `messages` row as verl makes them: each message rendered
    alone, the system prompt the template adds cut from each but the first, and every token
    of an assistant message trained but its first len(generation prompt). verl reads no
    `{% generation %}` blocks."""
    empty = [{"role": "user", "content": ""}]
    token1 = _ids(tokenizer, empty, False)
    token2 = _ids(tokenizer, empty * 2, False)
    system_prompt = token1[: -(len(token2) - len(token1))]
    generation_prompt = _ids(tokenizer, empty, True)[len(token1) :]
    input_ids: list[int] = []
    loss_mask: list[int] = []
    for index, message in enumerate(messages):
        ids = _ids(tokenizer, [message], False)
        if index != 0 and message["role"] != "system":
            ids = ids[len(system_prompt) :]
        if message["role"] == "assistant":
            mask = [1] * len(ids)
            mask[: len(generation_prompt)] = [0] * len(generation_prompt)
        else:
            mask = [0] * len(ids)
        input_ids += ids
        loss_mask += mask
    # verl's sanity_check: the turns rendered alone are the conversation rendered whole
    assert input_ids == _ids(tokenizer, messages, False)
    return input_ids, loss_mask
