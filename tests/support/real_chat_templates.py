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


def qwen_tokenizer(name: str) -> Any:
    """The tiny tokenizer with the Qwen chat template `name` (qwen2_5_instruct, qwen3)."""
    tokenizer = build_tokenizer()
    tokenizer.add_tokens(QWEN_TOKENS)
    tokenizer.chat_template = template_text(name)
    return tokenizer
