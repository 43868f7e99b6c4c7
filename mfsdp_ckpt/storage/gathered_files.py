"""Whether the files every rank says it wrote into a step's temp dir are there for rank 0.

Each rank hashes its own `__R_*.distcp` files and rank 0 commits the gathered records. A
run dir on each machine's own disk (not shared storage) gave rank 0 records of files only
the other machines held: it committed a manifest listing them and the step read as saved,
yet no resume could load it. Rank 0 looks for each file, at its recorded size, first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from mfsdp_ckpt.format.file_hash import FileRecord


def unseen_files_line(tmp: Path, gathered: Sequence[Mapping[str, FileRecord]]) -> str | None:
    """None when every file of `gathered` (by rank: its records, by name relative to `tmp`)
    is in `tmp` at its recorded size; else a line naming the ranks whose files are not."""
    unseen = [rank for rank, files in enumerate(gathered) if not _all_there(tmp, files)]
    if not unseen:
        return None
    return (
        f"the files of rank(s) {rank_ranges(unseen)} (torchrun numbers ranks in the order the"
        " machines joined, not by --node-rank) are not there as those ranks wrote them: the"
        " run dir (trainer.run_dir) must be on storage every machine sees"
    )


def _all_there(tmp: Path, files: Mapping[str, FileRecord]) -> bool:
    for name, record in files.items():
        try:
            if (tmp / name).stat().st_size != record.size:
                return False
        except OSError:
            return False
    return True


def rank_ranges(ranks: Iterable[int]) -> str:
    """`0, 2-5, 7` for ranks 0, 2, 3, 4, 5, 7."""
    spans: list[list[int]] = []
    for rank in sorted(ranks):
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
