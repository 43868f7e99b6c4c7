"""The sizes a Megatron record states held to the stored tensors where export refuses the
record for its kind (LayerNorm, GELU, multi-latent attention, ...).

validate's UNSUPPORTED verdict says "intact": a sound record of a model export does not
convert. The supported path proves a record's sizes by planning the export and comparing
every mapped shape with the config it derives (`export_plan.wrong_shape`); the refused
path stopped at the derivation, so a record of another hidden size, FFN size or head count
than the tensors read as intact. Here the same comparison runs on the config the refused
derivation made (`MegatronKindRefused.config`), over the tensors whose shape the refused
kind does not change. A kind that keeps the family's shapes (`keeps_shapes`: LayerNorm, a
sigmoid router) holds every tensor the family's name table maps (a kind's own tensors, a
LayerNorm's biases or learned position embeddings, have no place in it and are passed
over), linear_fc1 aside, whose rows are two FFN halves only in a gated MLP (GELU's is one).
Any other kind (multi-latent attention with its own value head size, an attention output
gate's rows in linear_qkv, experts in a latent space, linear attention) may reshape any
attention or MLP tensor: only the ones the hidden size and vocabulary alone set are held,
the embedding, the head and the norms around each block.
"""

from __future__ import annotations

import re
from typing import Any

from mfsdp_ckpt.convert.export_plan import model_weights, recorded_geometry, wrong_shape
from mfsdp_ckpt.convert.export_source import ExportSource, expected_weights_of, json_config
from mfsdp_ckpt.convert.fused_tensors import EXPERT_GATE_UP, GATE_UP
from mfsdp_ckpt.convert.hf_config import HFConfigError
from mfsdp_ckpt.convert.mapping_errors import MappingError, ShapeError
from mfsdp_ckpt.convert.name_maps import MCORE, MCORE_FAMILIES, map_names
from mfsdp_ckpt.convert.recorded_vocab import fitted_config, vocab_fit
from mfsdp_ckpt.errors import MfsdpError

# HF targets (name-table templates) whose shapes the hidden size and vocabulary alone set
_HIDDEN_ONLY = re.compile(
    r"model\.embed_tokens\.weight|lm_head\.weight|model\.norm\.weight"
    r"|model\.layers\.\{layer\}\.(input|post_attention)_layernorm\.weight"
)


def kind_refused_shapes(
    source: ExportSource, config: dict[str, Any], where: str, keeps_shapes: bool
) -> tuple[str, str] | None:
    """(`[stored key]`, how it contradicts `config`) for the first stored tensor whose shape
    the config.json a record export refuses for its kind derives (`where`: the record, for
    messages) contradicts, or None where they fit or cannot be mapped by its family's table
    (other findings name that). `keeps_shapes`: whether the refused kinds keep the family's
    shapes (`MegatronKindRefused.keeps_shapes`); where not, only the hidden size is held."""
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
    geometry, expected = recorded_geometry(source, made), expected_weights_of(made)
    for path, key in sorted(stored.items()):
        rule = next((r for r in rules if re.fullmatch(r.source, path)), None)
        if rule is None or rule.transform in (GATE_UP, EXPERT_GATE_UP):
            continue
        if not keeps_shapes and not all(_HIDDEN_ONLY.fullmatch(t) for t in rule.targets):
            continue
        shape = source.reader.tensors[key].shape
        try:
            items = map_names({path: shape}, {path: key}, MCORE, made.model_type, geometry)
        except ShapeError as err:  # a fused tensor that does not split by the record's numbers
            return f"[{key}]", str(err).removeprefix(f"[{key}]: ")
        except MappingError:
            return None
        if (wrong := wrong_shape(items, expected)) is not None:
            return f"[{key}]", wrong.removeprefix(f"[{key}]: ")
    return None
