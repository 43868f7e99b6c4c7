"""Fixtures the checkpoint tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.interop_layouts import maker


@pytest.fixture(scope="session")
def made_optim(tmp_path_factory) -> Path:
    """The Megatron-LM-shaped checkpoint with optimizer state, made once per session."""
    return maker().make(tmp_path_factory.mktemp("megatron_lm_optim"))
