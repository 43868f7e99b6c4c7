"""The sizes a Megatron record states held to the stored tensors where export refuses the
record for its kind (LayerNorm, GELU, a sigmoid router, ...).

validate's UNSUPPORTED verdict says "intact": a sound record of a model export does not
convert. The supported path proves a record's sizes by planning the export and comparing
every mapped shape with the config it derives (`export_plan.wrong_shape`); the refused
path stopped at the derivation, so a record of another hidden size, FFN size or head count
than the tensors read as intact. Here the same comparison runs on the config the refused
derivation made (`MegatronKindRefused.config`), over the tensors whose shape the refused
kind does not change: those the family's name table maps (a kind's own tensors, a
LayerNorm's biases or learned position embeddings, have no place in it and are passed
over), linear_fc1 aside, whose rows are two FFN halves only in a gated MLP (GELU's is one).
"""

from __future__ import annotations

import re
from typing import Any

from mfsdp_ckpt.convert.export_plan import model_weights, recorded_geometry, wrong_shape
from mfsdp_ckpt.convert.export_source import ExportSource, expected_weights_of, json_config
from mfsdp_ckpt.convert.fused_tensors import GATE_UP
from mfsdp_ckpt.convert.hf_config import HFConfigError
from mfsdp_ckpt.convert.mapping_errors import MappingError, ShapeError
from mfsdp_ckpt.convert.name_maps import MCORE, MCORE_FAMILIES, map_names
from mfsdp_ckpt.convert.recorded_vocab import fitted_config, vocab_fit
from mfsdp_ckpt.errors import MfsdpError


def kind_refused_shapes(source: ExportSource, config: dict[str, Any], where: str) -> str | None:
    """How the stored tensors contradict `config` (the config.json a record export refuses
    for its kind derives; `where`: the record, for messages), as one line, or None where
    they fit or cannot be mapped by its family's table (other findings name that)."""
    try:
        made = json_config(config, where)
        stored, _mtp = model_weights(source, drop_mtp=True)
    except (HFConfigError, MfsdpError):
        return None
    rules = MCORE_FAMILIES.get(made.model_type) if made is not None else None
    if made is None or rules is None:
        return None
    # the vocab_size export writes where the record proves fewer rows, as the supported path
    made = fitted_config(made, vocab_fit(source.paths, source.reader, made.vocab_size))
    kept = {}
    for path, key in stored.items():
        rule = next((r for r in rules if re.fullmatch(r.source, path)), None)
        if rule is not None and rule.transform is not GATE_UP:
            kept[path] = key
    shapes = {path: source.reader.tensors[key].shape for path, key in kept.items()}
    try:
        items = map_names(shapes, kept, MCORE, made.model_type, recorded_geometry(source, made))
    except ShapeError as err:  # a fused tensor that does not split by the record's numbers
        return str(err)
    except MappingError:
        return None
    return wrong_shape(items, expected_weights_of(made))
