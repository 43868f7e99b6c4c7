"""verl's MultiTurnSFTDataset tokenization of a `messages` row, which `tokenize_chat` holds
its own against. verl renders each message alone, cuts the template's system prompt off each
but the first (and off no system turn), and trains every token of an assistant message but
its first generation prompt's length; its sanity check refuses a row whose messages so
rendered are not the chat rendered whole (`data.ignore_input_ids_mismatch` false, its
default). Knowing verl's result lets a row verl trains train as verl trains it where growing
prefixes cannot split its turns (Qwen3's template gives the last turn of a prefix an empty
think block), and lets the run say which rows train otherwise than under verl: a difference
nothing reported trained other targets than a user porting a verl run expected.

Written from verl/utils/dataset/multiturn_sft_dataset.py (`__getitem__`,
`_process_single_message`, `sanity_check`) and verl/utils/chat_template.py
(`extract_system_prompt_and_generation`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# renders turns (with the generation prompt or not) to token ids
Render = Callable[[list[dict], bool], list[int]]

# How a row trains otherwise than in verl (`Example.unlike_verl`)
UNTRAINED = "untrained"  # verl does not train the row: its sanity check, or a template error
MASKED = "masked"  # verl trains the same tokens with another loss mask


@dataclass(frozen=True)
class VerlRow:
    """verl's `input_ids` and `loss_mask` of a row, and whether verl trains it at all
    (`trained`: its sanity check passed and the template rendered each message alone)."""

    input_ids: list[int]
    loss_mask: list[int]
    trained: bool


@dataclass(frozen=True)
class TemplatePrompts:
    """What verl cuts off a message rendered alone: the template's system prompt (off each
    message but the first, and off no system turn) and the generation prompt's length (the
    untrained start of an assistant message). The same for every row a template renders:
    found once per tokenizer (`template_prompts`), three renders fewer a row."""

    system_prompt: list[int]
    generation_prompt: int


def template_prompts(render: Render) -> TemplatePrompts:
    """The template's prompts, as verl finds them: from an empty user message rendered once,
    twice, and with the generation prompt."""
    empty = [{"role": "user", "content": ""}]
    one = render(empty, False)
    system_prompt = one[: -(len(render(empty * 2, False)) - len(one))]
    return TemplatePrompts(system_prompt, len(render(empty, True)) - len(one))


def verl_row(
    render: Render, messages: list[dict], whole: list[int], prompts: TemplatePrompts
) -> VerlRow:
    """verl's tokenization of `messages`, `whole` being their ids rendered as one chat.
    What `render` raises (a template that requires a user turn first, rendering an assistant
    message alone) is raised: verl's `__getitem__` raises there too, and the row is not
    trained (`NOT_RENDERED`)."""
    input_ids: list[int] = []
    loss_mask: list[int] = []
    for index, message in enumerate(messages):
        ids = render([message], False)
        if index != 0 and message["role"] != "system":
            ids = ids[len(prompts.system_prompt) :]
        untrained = len(ids)
        if message["role"] == "assistant":
            untrained = min(prompts.generation_prompt, len(ids))
        input_ids += ids
        loss_mask += [0] * untrained + [1] * (len(ids) - untrained)
    return VerlRow(input_ids, loss_mask, input_ids == whole)


# verl's result for a row whose messages the template cannot render alone
NOT_RENDERED = VerlRow([], [], False)


def unlike_verl(verl: VerlRow, loss_mask: list[int]) -> str:
    """How a row whose loss mask here is `loss_mask` trains otherwise than `verl`: "" where
    it does not, else UNTRAINED or MASKED."""
    if not verl.trained:
        return UNTRAINED
    return "" if verl.loss_mask == loss_mask else MASKED
