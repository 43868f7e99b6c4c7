"""Every JSON object a command prints (`--json`, and the failure object) is made by `json_text`,
so each one is strict JSON that any parser reads.

Python's `json.dumps` writes a non-finite float as `NaN` or `Infinity`, which JavaScript's
`JSON.parse`, Go and serde_json reject: a checkpoint's saved objects hold them
(ReduceLROnPlateau's `best=inf`), and so may a run's metrics.jsonl (a loss gone NaN). They
are written as `null`, as every such field is documented to be when there is no number.

A path with bytes that are not UTF-8 reaches Python as lone surrogates (`\\udcff` for the
byte 0xff, `os.fsdecode`'s surrogateescape); `json.dumps` wrote them as `\\udcff` escapes,
which strict parsers refuse or turn into U+FFFD. `shown_bytes` writes such a byte as `\\xff`,
and any other lone surrogate as `\\ud800`, in the JSON output and in the text lines alike
(`cli.lines.say`, `cli.errors.fail`), so both say the same thing of one path: the rule is
`printable.escaped`, which the text lines use too.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from mfsdp_ckpt.check.printable import escaped

# One surrogate code point: surrogateescape's U+DC80..U+DCFF (an undecodable byte) or any
# other lone one (a JSON file's "\ud800").
_SURROGATE = re.compile("[\ud800-\udfff]")


def shown_bytes(text: str) -> str:
    """`text` with each byte that was not UTF-8 (a surrogateescape surrogate) written as
    `\\xff`, and any other lone surrogate as `\\ud800`: printable, and encodable as UTF-8."""
    return (
        _SURROGATE.sub(lambda found: escaped(found.group()), text)
        if _SURROGATE.search(text)
        else text
    )


def _strict(value: Any) -> Any:
    """`value` with non-finite floats as None and every string (keys too) `shown_bytes`."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return shown_bytes(value)
    if isinstance(value, dict):
        return {
            shown_bytes(key) if isinstance(key, str) else key: _strict(item)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_strict(item) for item in value]
    return value


def json_text(value: Any, indent: int | None = None) -> str:
    """`value` as strict JSON text (`allow_nan=False`: a NaN this missed is an error, not
    output a strict parser refuses), non-finite floats as null, undecodable bytes as `\\xff`."""
    return json.dumps(_strict(value), indent=indent, allow_nan=False)


__all__ = ["json_text", "shown_bytes"]
