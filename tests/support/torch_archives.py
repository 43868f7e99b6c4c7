"""torch.save archives built by hand for tests: a real archive's layout with a planted
data.pkl, so a reader meets damage or a refused global inside an otherwise valid file."""

from __future__ import annotations

import io
import zipfile

import torch


def torch_archive(pickled: bytes, folder: str = "archive") -> bytes:
    """A torch.save archive of None with `pickled` as its data.pkl, its members in `folder`
    (torch.save names the folder "archive"; a long one tests names cut in messages)."""
    saved = io.BytesIO()
    torch.save(None, saved)
    source, out = zipfile.ZipFile(io.BytesIO(saved.getvalue())), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for info in source.infolist():
            data = pickled if info.filename.endswith("/data.pkl") else source.read(info)
            archive.writestr(info.filename.replace("archive", folder, 1), data)
    return out.getvalue()
