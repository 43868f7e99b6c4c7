"""Override lists a test builds from a shared one: a test that needs another value of a shared
setting replaces its override, so the list a run records shows each key once."""

from __future__ import annotations

from collections.abc import Iterable


def _key(item: str) -> str:
    return item.partition("=")[0].strip().lstrip("+")


def replaced(overrides: Iterable[str], *changed: str) -> list[str]:
    """`overrides` with each `key=value` of `changed` in place of the override giving its
    key (appended where none does)."""
    keys = {_key(item) for item in changed}
    return [item for item in overrides if _key(item) not in keys] + list(changed)
