"""A model dir's weight files checked against the model its config builds, before any loads.

transformers' `from_pretrained` drops a stored tensor the model has no place for and
initialises at random a parameter no file holds, and says so only in its load report (a
table over many lines, with terminal escapes). Weights of 4 layers under a config.json of 2
layers trained a 2-layer model and exited 0, where import-hf, export-hf and validate refuse
the same files. Here each safetensors header is checked against its file (as import-hf
checks them, without reading a weight), then every stored name and shape against those the
config implies: a tensor it has no place for, a shape it does not give, a parameter no file
holds are each refused in one line, exit 2 (the model dir given does not hold the model its
config describes; a damaged file stays exit 1, `ModelFilesError`). Tensors that config.json's
own model has a place for, but that the run's `model.overrides` take away (a base of 2 layers
trained under `num_hidden_layers: 1`), are the user's choice: one note names them. Weights
only as pickles (`*.bin`) are refused by the reader, naming them: they are never unpickled.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mfsdp_ckpt.errors import MfsdpUsageError

if TYPE_CHECKING:
    from mfsdp_ckpt.convert.hf_config import ExpectedWeights
    from mfsdp_ckpt.storage.safetensors_source import SafetensorsSource

log = logging.getLogger("mfsdp.model")

_LAYER = re.compile(r"model\.layers\.(\d+)\.")
# A buffer older saves hold (Llama's per-layer RoPE frequencies), computed from the config:
# transformers skips it as it loads, and so does this check.
_DERIVED = re.compile(r"(^|\.)rotary_emb\.inv_freq$")


class ModelWeightsError(MfsdpUsageError, ValueError):
    """The model dir's weights do not fit its config.json (exit 2). Every rank reads the same
    files and meets it alike: rank 0 says it, once."""

    every_rank = True


def check_weight_files(assets: Path, config: Any, overrides: dict[str, Any]) -> SafetensorsSource:
    """The model dir's weight files, read as headers only, once each fits `config` (the
    transformers config the run builds from `assets`' config.json with `overrides`, the
    run's model.overrides). The files may lead anywhere: the model dir is the user's own,
    not a checkpoint handed over. ModelFilesError for a damaged file, ModelWeightsError for
    weights of another model."""
    from mfsdp_ckpt.convert.hf_config import (
        read_config_json,
        weights_disagreement,
        weights_from_table,
    )
    from mfsdp_ckpt.convert.hf_shapes import hf_state_dict_shapes
    from mfsdp_ckpt.storage.safetensors_source import SafetensorsError, SafetensorsSource
    from trainer.model import ModelFilesError

    try:
        source = SafetensorsSource(assets, links_anywhere=True)
    except SafetensorsError as err:
        raise ModelFilesError(str(err)) from None
    settings = config.to_dict()
    table = hf_state_dict_shapes(settings)
    if table is None:  # a family name_maps has no table for: transformers checks
        return source
    expected = weights_from_table(
        config.model_type, table, bool(settings.get("tie_word_embeddings", False))
    )
    described = "config.json with model.overrides" if overrides else "config.json"
    fields = read_config_json(assets)[1] if overrides else {}
    own = _config_json_weights(settings, fields, overrides) if overrides else None
    _refuse_strangers(source, expected, config, described, own)
    shapes = {name: entry.shape for name, entry in source.tensors.items()}
    set_by = _set_by_overrides(settings, fields, overrides, expected) if overrides else None
    problem = weights_disagreement(assets, shapes, expected, unknown=False, set_by=set_by)
    if problem:
        raise ModelWeightsError(problem)
    return source


def _refuse_strangers(
    source: SafetensorsSource,
    expected: ExpectedWeights,
    config: Any,
    described: str,
    own: ExpectedWeights | None,
) -> None:
    """ModelWeightsError naming the file of the first stored tensor (by name) the model has
    no place for, and how many there are; for layers past num_hidden_layers, which layers
    the weights hold. With `own` (the weights of config.json's own model, when
    model.overrides shape the run's), tensors that model holds are left out with a note."""
    strangers = sorted(
        name
        for name in source.tensors
        if name not in expected.allowed and not _DERIVED.search(name)
    )
    if strangers and own is not None and all(name in own.allowed for name in strangers):
        log.warning(
            "note: %d tensor(s) of %s (e.g. %r) are left out: model.overrides build a"
            " model without them",
            len(strangers),
            source.root,
            strangers[0],
        )
        return
    if not strangers:
        return
    first = strangers[0]
    layers = [int(found[1]) for name in source.tensors if (found := _LAYER.match(name))]
    beyond = ""
    if layers and max(layers) >= config.num_hidden_layers:
        beyond = (
            f"; it says num_hidden_layers={config.num_hidden_layers}, the weights hold layers"
            f" {min(layers)}-{max(layers)}"
        )
    raise ModelWeightsError(
        f"{source.root / source.tensors[first].file}: {len(strangers)} tensor(s) the"
        f" {expected.model_type} model of {described} has no place for, e.g. {first!r}"
        f"{beyond}; transformers would drop them and train a model other than the weights"
        " hold"
    )


def _reverted(
    settings: dict[str, Any], fields: dict[str, Any], keys: Collection[str]
) -> dict[str, Any]:
    """The run's config (`settings`, transformers' defaults filled in: a config.json may
    leave out tie_word_embeddings or num_key_value_heads) with each of `keys` back at its
    config.json value (`fields`), or left to the family's default where config.json has
    none."""
    own = {key: value for key, value in settings.items() if key not in keys}
    own.update({key: fields[key] for key in keys if key in fields})
    return own


def _config_json_weights(
    settings: dict[str, Any], fields: dict[str, Any], overrides: dict[str, Any]
) -> ExpectedWeights | None:
    """The weights the model of config.json (`fields`) alone holds: the run's config with
    every overridden key reverted (`_reverted`). None for a family name_maps has no table
    for."""
    from mfsdp_ckpt.convert.hf_config import weights_from_table
    from mfsdp_ckpt.convert.hf_shapes import hf_state_dict_shapes

    own = _reverted(settings, fields, overrides)
    table = hf_state_dict_shapes(own)
    if table is None:
        return None
    return weights_from_table(own["model_type"], table, bool(own.get("tie_word_embeddings", False)))


def _set_by_overrides(
    settings: dict[str, Any],
    fields: dict[str, Any],
    overrides: dict[str, Any],
    expected: ExpectedWeights,
) -> Callable[[str], str | None]:
    """For a tensor's name, `model.overrides sets KEY=VALUE` naming each override without
    which (`_reverted`) the run's model would give the tensor another shape or no place;
    None where config.json's own values do. A refusal of weights that do not fit then names
    the override, not config.json, which says otherwise."""
    from mfsdp_ckpt.check.printable import cut_to
    from mfsdp_ckpt.convert.hf_shapes import hf_state_dict_shapes

    tables = {key: hf_state_dict_shapes(_reverted(settings, fields, [key])) for key in overrides}

    def set_by(name: str) -> str | None:
        keys = [
            key
            for key, table in tables.items()
            if table is not None and table.get(name) != expected.allowed.get(name)
        ]
        shown = ", ".join(f"{key}={cut_to(repr(overrides[key]), 40)}" for key in keys)
        return f"model.overrides sets {shown}" if keys else None

    return set_by
