"""The names of a model dir's files are spelled once, in `format/model_files.py`.

config.json was typed as a literal in fifteen places of mfsdp_ckpt: a misspelling in any one
of them would quietly find no file (a model dir taken for none, a config left unfitted).
Every other module names it, and the weights' index, through the constants there.
"""

from __future__ import annotations

import io
import tokenize

import pytest

from mfsdp_ckpt.format import model_files
from tests.support.paths import REPO

HOME = REPO / "mfsdp_ckpt" / "format" / "model_files.py"


def _string_literals(path) -> set[str]:
    """The values of the plain string literals in `path` (docstrings included: a docstring
    that is exactly a file name names it as a literal would)."""
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    values = set()
    for token in tokens:
        if token.type == tokenize.STRING and token.string[0] in "\"'":
            values.add(token.string[1:-1])
    return values


@pytest.mark.parametrize("name", [model_files.HF_CONFIG_FILE, model_files.INDEX_FILE])
def test_only_model_files_spells_the_name(name):
    spelled = [
        str(path.relative_to(REPO))
        for path in sorted((REPO / "mfsdp_ckpt").rglob("*.py"))
        if path != HOME and name in _string_literals(path)
    ]
    assert spelled == [], f"{name} spelled as a literal in {spelled}; use model_files' constant"
