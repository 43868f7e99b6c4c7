"""Running out of memory is one line whose advice fits the command, naming no path it is not
about. export-hf said `error: out of memory: [Errno 12] Cannot allocate memory: '<--out>'
(free memory, lower the batch or sequence length, ...)`: the output claim pinned --out on
every error that named no file, and every command got training's advice."""

from __future__ import annotations

import errno
import os

import pytest
from click.testing import CliRunner

from mfsdp_ckpt.storage.out_dir import claim_output
from tests.support.cli_errors import one_error
from tests.support.hf_to_mcore import tiny_causal_lm
from tests.support.interop_layouts import run_cli
from tests.support.megatron_checkpoints import save_dcp

TRAINING_ADVICE = "lower the batch or sequence length"


def _raise(code: int):
    def fail(*_args, **_kwargs):
        raise OSError(code, os.strerror(code))

    return fail


@pytest.mark.parametrize("code", [errno.ENOMEM, errno.EMFILE], ids=errno.errorcode.get)
def test_an_error_of_the_process_inside_an_output_claim_names_no_path(tmp_path, code):
    out = tmp_path / "out"
    with pytest.raises(OSError) as raised, claim_output(out):
        _raise(code)()
    assert raised.value.errno == code
    assert raised.value.filename is None and str(out) not in str(raised.value)


def test_a_full_disk_inside_an_output_claim_still_names_out(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(OSError) as raised, claim_output(out):
        _raise(errno.ENOSPC)()
    assert raised.value.filename == str(out)


def test_export_out_of_memory_gives_conversion_advice_and_no_path(tmp_path, monkeypatch):
    """The allocation fails inside the export's output claim (the NaN/Inf count of the bytes
    read before they are copied)."""
    model = tiny_causal_lm("llama", vocab=64)
    ckpt = save_dcp({"model": model.state_dict()}, tmp_path / "dist_ckpt")
    model.config.save_pretrained(tmp_path / "huggingface")
    out = tmp_path / "hf"
    monkeypatch.setattr("mfsdp_ckpt.convert.export_stream.count_nonfinite", _raise(errno.ENOMEM))
    code, _stdout, err = run_cli("ckpt", "export-hf", ckpt, "--out", out)
    assert code == 1, err
    line = one_error(err, "out of memory", "largest tensor", "ulimit -v")
    assert str(out) not in line and TRAINING_ADVICE not in line


@pytest.mark.parametrize("alone", [False, True], ids=["mfsdp", "rank"])
def test_training_out_of_memory_keeps_the_training_advice(tmp_path, monkeypatch, alone):
    """`mfsdp train sft`, and the `train` group a rank runs on its own (`python -m cli.train`)."""
    import cli.train
    from cli.app import app

    def out_of_memory(*_args, **_kwargs):
        raise MemoryError

    monkeypatch.setattr(cli.train, "run_command", out_of_memory)
    command, args = (cli.train.train, ["sft"]) if alone else (app, ["train", "sft"])
    result = CliRunner().invoke(command, args, prog_name="mfsdp train" if alone else "mfsdp")
    assert result.exit_code == 1
    one_error(result.stderr, "out of memory", TRAINING_ADVICE, "ulimit -v")
