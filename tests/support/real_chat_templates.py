"""The tiny test tokenizer with a real model family's chat template
(tests/fixtures/chat_templates), and the tokens that template writes added, so that chats
tokenize as that family's tokenizer lays them out, in a tokenizer small enough to build
in a test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer.tiny import build_tokenizer

TEMPLATES = Path(__file__).resolve().parent.parent / "fixtures" / "chat_templates"
# the markers Qwen2.5's and Qwen3's templates write, one token each as in their tokenizers
QWEN_TOKENS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]


def template_text(name: str) -> str:
    """The chat template `name`.jinja of tests/fixtures/chat_templates."""
    return (TEMPLATES / f"{name}.jinja").read_text()


# the markers other templates write besides those, one token each as in their tokenizers
OTHER_TOKENS = {
    "vllm_mistral": ["[INST]", "[/INST]", "[TOOL_CALLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"],
    # DeepSeek's markers are spelt with fullwidth bars and a lower-block underscore
    "deepseek_r1_jan2025": [
        "<\uff5cUser\uff5c>",
        "<\uff5cAssistant\uff5c>",
        "<\uff5cend\u2581of\u2581sentence\uff5c>",
    ],
    "deepseek_r1_distill_jan2025": [
        "<\uff5cUser\uff5c>",
        "<\uff5cAssistant\uff5c>",
        "<\uff5cend\u2581of\u2581sentence\uff5c>",
    ],
}


def qwen_tokenizer(name: str) -> Any:
    """The tiny tokenizer with the chat template `name` of tests/fixtures/chat_templates
    (qwen2_5_instruct, qwen3, or another family's, whose markers are added too)."""
    tokenizer = build_tokenizer()
    tokenizer.add_tokens(QWEN_TOKENS + OTHER_TOKENS.get(name, []))
    tokenizer.chat_template = template_text(name)
    return tokenizer
