"""validate fails a checkpoint whose non-tensor entry torch's own DCP load would run as code.

torch's `DefaultLoadPlanner.load_bytes` reads every non-tensor entry with
`torch.load(weights_only=False)`, so verl, Megatron-LM and torchtitan run whatever such a
pickle calls. validate used to say "valid" (exit 0) for one calling os.system, and inspect
only "opaque". The entries are built with torch's own DCP save of an object whose
`__reduce__` returns (os.system, ...); the command would create a marker file, which must
never appear: nothing here runs it.
"""

from __future__ import annotations

import argparse
import enum
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp

from mfsdp_ckpt.check.object_pickles import CHECKPOINT_DATA, TORCH_ADMITTED
from mfsdp_ckpt.format.restricted_pickle import COMPUTED, UNNAMED, pickle_globals
from tests.support.cli_errors import error_prefixed_lines
from tests.support.interop_layouts import run_cli

SYSTEM = f"{os.system.__module__}.system"  # posix.system here


class _RunsACommand:
    def __init__(self, marker: Path):
        self.command = f"touch {marker}"

    def __reduce__(self):
        return (os.system, (self.command,))


class _Kind(enum.Enum):
    encoder = 1


def _save(tmp_path: Path, extra: dict) -> Path:
    out = tmp_path / "ckpt"
    state = {"model.embed_tokens.weight": torch.randn(8, 4), **extra}
    dcp.save(state, checkpoint_id=str(out), no_dist=True)
    return out


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "RAN"


@pytest.mark.parametrize("deep", [False, True])
def test_validate_names_the_entry_and_the_callable_and_fails(tmp_path, marker, deep):
    ckpt = _save(tmp_path, {"extra.evil": _RunsACommand(marker), "extra.step": 3})
    code, stdout, err = run_cli("ckpt", "validate", ckpt, *(["--deep"] if deep else []))
    errors = error_prefixed_lines(stdout + err)
    assert code == 1 and "INVALID" in stdout + err, stdout + err
    assert len(errors) == 1, stdout + err
    assert "[extra.evil]" in errors[0] and SYSTEM in errors[0], errors[0]
    assert "dcp.load" in errors[0] and "not run here" in errors[0], errors[0]
    assert not marker.exists()


def test_inspect_says_what_torch_would_execute(tmp_path, marker):
    ckpt = _save(tmp_path, {"extra.evil": _RunsACommand(marker)})
    code, stdout, err = run_cli("ckpt", "inspect", ckpt)
    assert code == 0, stdout + err
    line = next(line for line in stdout.splitlines() if line.startswith("extra.evil"))
    assert f"would execute {SYSTEM} when torch loads it" in line, line
    assert not marker.exists()


def test_many_such_entries_are_listed_first_then_counted(tmp_path, marker):
    ckpt = _save(tmp_path, {f"extra.evil{i}": _RunsACommand(marker) for i in range(8)})
    code, stdout, err = run_cli("ckpt", "validate", ckpt)
    errors = error_prefixed_lines(stdout + err)
    assert code == 1
    assert sum(SYSTEM in line for line in errors) == 5, stdout + err
    assert any("(+3 more non-tensor entries" in line for line in errors), stdout + err
    assert not marker.exists()


def test_the_data_real_checkpoints_hold_passes(tmp_path):
    """Plain values, tensors inside objects, Megatron-LM's argparse.Namespace (with a dtype
    and a partial naming a function it never calls) and numpy's RNG state: no line."""
    args = argparse.Namespace(
        hidden_size=4, params_dtype=torch.bfloat16, init=functools_partial_of_normal()
    )
    ckpt = _save(
        tmp_path,
        {
            "extra.step": 3,
            "extra.rng": {"np": np.random.get_state(), "torch": torch.get_rng_state()},
            "args": args,
            "extra.group": {"betas": (0.9, 0.95), "params": [0, 1], "name": "x"},
        },
    )
    code, stdout, err = run_cli("ckpt", "validate", ckpt)
    assert code == 0, stdout + err
    assert "pickle" not in stdout + err, stdout + err


def functools_partial_of_normal():
    import functools

    return functools.partial(torch.nn.init.normal_, std=0.02)


def test_an_enum_member_of_an_unknown_class_is_a_warning(tmp_path):
    """Megatron-LM's args hold enums of its own: a class called with one value is named as
    a warning (it is not imported here to tell whether it is an enum)."""
    ckpt = _save(tmp_path, {"extra.kind": _Kind.encoder})
    code, stdout, err = run_cli("ckpt", "validate", ckpt)
    assert code == 0, stdout + err
    warnings = [line for line in (stdout + err).splitlines() if "[extra.kind]" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning:"), stdout + err
    assert f"{__name__}._Kind" in warnings[0], warnings[0]


# --------------------------------------------------------------------------- the scanner
@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_the_callable_is_found_in_every_pickle_protocol(marker, protocol):
    uses = pickle_globals(pickle.dumps({"a": [_RunsACommand(marker)]}, protocol=protocol))
    assert any(use.name == SYSTEM and use.called for use in uses), uses


def test_a_global_the_pickle_computes_and_a_call_of_a_result_are_unnamed():
    """STACK_GLOBAL of a string built at load time, and calling what a call returned: the
    callable cannot be named from the opcodes, which is itself the finding."""
    computed_name = b"\x80\x04\x8c\x08builtins\x8c\x03str\x93\x8c\x02os\x85R\x8c\x06system\x93."
    assert UNNAMED in [use.name for use in pickle_globals(computed_name)]
    call_of_result = b"\x80\x02cbuiltins\ngetattr\n(K\x01\x8c\x03bitq\x00tR)R."
    uses = pickle_globals(call_of_result)
    assert any(use.name == COMPUTED and use.called for use in uses), uses


def test_writing_into_a_global_is_found():
    data = b"\x80\x02cmodule\nobj\n}(\x8c\x01a\x8c\x01bub."
    uses = pickle_globals(data)
    assert any(use.name == "module.obj" and use.built_into for use in uses), uses


def test_what_is_admitted_is_what_torch_admits():
    """The names taken as torch's weights-only globals are all ones torch's loader admits;
    the data types real checkpoints hold are all ones it does not (they are listed apart)."""
    from torch._weights_only_unpickler import _get_allowed_globals

    torch_admits = set(_get_allowed_globals())
    assert torch_admits >= TORCH_ADMITTED, sorted(TORCH_ADMITTED - torch_admits)
    assert not CHECKPOINT_DATA & torch_admits
