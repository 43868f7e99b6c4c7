"""The adapter an mfsdp LoRA step stores: its lora_A / lora_B pairs and the merge delta.

Read once and checked against the manifest's rank, it serves both exports of a LoRA
checkpoint: the PEFT adapter dir (`peft_adapter`) writes its tensors, the merge
(`lora_merge`) adds its `scale * B @ A` to the base.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mfsdp_ckpt.convert.export_errors import ExportError
from mfsdp_ckpt.convert.export_source import source_for
from mfsdp_ckpt.convert.export_write import reading_checked
from mfsdp_ckpt.convert.weight_dtype import MFSDP_LORA, refuse_non_float_adapter
from mfsdp_ckpt.format import layout, state_keys
from mfsdp_ckpt.format.manifest import Manifest, ManifestError
from mfsdp_ckpt.lora import AdapterKey, LoraSettings, parse_adapter_key, read_lora_settings
from mfsdp_ckpt.storage.reader import CheckpointReader

if TYPE_CHECKING:
    import torch


@dataclass
class StoredAdapter:
    """The stored adapter: per adapted module, the checkpoint keys of its A and B."""

    reader: CheckpointReader
    modules: dict[str, dict[str, str]]  # module path -> {"A": key, "B": key}
    settings: LoraSettings

    def keys(self) -> list[tuple[AdapterKey, str]]:
        return [
            (AdapterKey(module, which, "default"), pair[which])
            for module, pair in sorted(self.modules.items())
            for which in ("A", "B")
        ]

    def delta(self, module: str) -> torch.Tensor:
        """scale * B @ A in fp32: what PEFT adds to the module's weight."""
        pair = self.modules[module]
        a = self.reader.read_tensor(pair["A"]).float()
        b = self.reader.read_tensor(pair["B"]).float()
        return (b @ a) * self.settings.scale


def read_adapter(paths: layout.CheckpointPaths, manifest: Manifest) -> StoredAdapter:
    """Pair up the stored lora_A / lora_B tensors and check them against the recorded rank,
    each floating point (`refuse_non_float_adapter`, as any adapter's). Its tensors are
    read `reading_checked`, as a full export's are: each record against the CRC written
    for it and, where the manifest records them, the CRC this step saved (a data file of
    another step is refused)."""
    try:
        settings = read_lora_settings(manifest, str(paths.manifest))
    except ManifestError as err:
        raise ExportError(str(err)) from None
    reader = reading_checked(source_for(paths, CheckpointReader(paths.dist_ckpt))).reader
    where = paths.dist_ckpt
    modules: dict[str, dict[str, str]] = {}
    roots = state_keys.state_roots(reader.tensors)
    for key in roots.weight_keys(reader.tensors):
        parsed = parse_adapter_key(roots.module_path(key))
        if parsed is None:
            raise ExportError(f"{where} [{key}]: not an adapter weight, yet the manifest says LoRA")
        modules.setdefault(parsed.module, {})[parsed.which] = key
    if not modules:
        raise ExportError(f"{where}: no adapter weights (no lora_A / lora_B tensors)")
    for module, pair in sorted(modules.items()):
        if set(pair) != {"A", "B"}:
            raise ExportError(f"{where}: {module} has lora_{''.join(pair)} only, not both A and B")
        dtypes = {key: reader.tensors[key].dtype for key in pair.values()}
        refuse_non_float_adapter(pair.values(), dtypes, MFSDP_LORA, where)
        a, b = reader.tensors[pair["A"]].shape, reader.tensors[pair["B"]].shape
        if len(a) != 2 or len(b) != 2 or a[0] != settings.rank or b[1] != settings.rank:
            raise ExportError(
                f"{where}: {module} lora_A {a} / lora_B {b} do not fit rank {settings.rank}"
            )
    return StoredAdapter(reader, modules, settings)
