"""A checkpoint's files held in memory behind the byte-store interface the reader uses, so the
fuzz tests feed the reader thousands of mutated `.metadata` files without touching disk."""

from __future__ import annotations

from mfsdp_ckpt.storage.byte_store import CheckpointFileError


class MemoryStore:
    """The real checkpoint's files in memory, with `.metadata` swapped for the fuzzed bytes."""

    def __init__(self, files: dict[str, bytes]):
        self.files, self.root = files, "<memory>"

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        data = self.files.get(name)
        if data is None:
            raise CheckpointFileError(f"{name}: file is missing")
        if offset < 0 or length < 0 or offset + length > len(data):
            raise CheckpointFileError(
                f"{name}: needs bytes [{offset}, {offset + length}) (truncated?)"
            )
        return data[offset : offset + length]

    def size(self, name: str) -> int | None:
        return len(self.files[name]) if name in self.files else None

    def list_files(self) -> list[str]:
        return sorted(self.files)
