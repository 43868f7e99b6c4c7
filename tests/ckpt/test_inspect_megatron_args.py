"""inspect describes Megatron-LM's `args` entry as what it is, the run's argparse.Namespace
read (by the restricted Namespace reader, nothing else) for the model config its `model`
line shows.

Was: `args  opaque  1773  (not decoded: holds types the restricted reader refuses)`, and
`not_decoded` in --json, on every Megatron-LM checkpoint, beside a model line saying the
config was read from [args].
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import megatron_args, megatron_run


def _args_entry(run: Path) -> tuple[dict, str]:
    code, out, err = run_cli("ckpt", "inspect", run, "--json")
    assert code == 0, out + err
    (entry,) = [o for o in json.loads(out)["objects"] if o["name"] == "args"]
    code, out, err = run_cli("ckpt", "inspect", run)
    assert code == 0, out + err
    (row,) = [line for line in out.splitlines() if line.startswith("args ")]
    return entry, row


def test_args_are_shown_as_the_namespace_the_model_config_is_read_from(tmp_path):
    model = tiny_causal_lm("llama", vocab=64)
    args = megatron_args(model)
    run = megatron_run(tmp_path, model, args)
    entry, row = _args_entry(run)
    note = f"argparse.Namespace of {len(vars(args))} settings, read for the model config"
    assert entry["kind"] == "Namespace" and entry["not_decoded"] is None
    assert entry["value"] is None and entry["note"] == note
    assert row.split()[1] == "Namespace" and row.endswith(f"  {note}")


class _RunsACommand:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_args_the_namespace_reader_refuses_say_why_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    model = tiny_causal_lm("llama", vocab=64)
    run = megatron_run(tmp_path, model, megatron_args(model, hook=_RunsACommand(marker)))
    entry, row = _args_entry(run)
    assert entry["kind"] == "opaque" and "refusing global" in entry["not_decoded"]
    assert "system" in entry["not_decoded"] and "(not decoded: refusing global" in row
    assert not marker.exists()
