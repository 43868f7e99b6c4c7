"""What a user coming from torchtitan, HF or verl types by habit: a subcommand without its
group (`mfsdp export-hf`), an option given as a command (`mfsdp version`), a trainer mfsdp
does not have (`mfsdp train ppo`), and dtype spellings torch and HF use (`bfloat16`)."""

from __future__ import annotations

import sys

import pytest

from cli.main import main


def _run_main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """`mfsdp ARGS` through the console entry point (where usage errors are reported)."""
    monkeypatch.setattr(sys, "argv", ["mfsdp", *args])
    with pytest.raises(SystemExit) as done:
        main()
    captured = capsys.readouterr()
    return int(done.value.code or 0), captured.out, captured.err


@pytest.mark.parametrize(
    "args, meant",
    [
        (["export-hf", "runs/demo", "--out", "hf"], "mfsdp ckpt export-hf"),
        (["validate", "runs/demo"], "mfsdp ckpt validate"),
        (["sft", "--config", "x.yaml"], "mfsdp train sft"),
        (["gsm8k", "--input", "x"], "mfsdp data gsm8k"),
        (["train", "ckpt"], "mfsdp ckpt"),
        (["version"], "mfsdp --version"),
    ],
)
def test_a_command_given_at_the_wrong_level_names_the_full_command(
    monkeypatch, capsys, args, meant
):
    code, out, err = _run_main(monkeypatch, capsys, *args)
    assert code == 2 and out == ""
    assert err.endswith(f"(did you mean '{meant}'?)\n") and err.count("\n") == 1, err


def test_a_command_with_no_close_name_lists_the_commands_there(monkeypatch, capsys):
    code, _out, err = _run_main(monkeypatch, capsys, "train", "ppo")
    assert (code, err) == (
        2,
        "error: No such command 'ppo' for 'mfsdp train'; its commands: grpo, sft\n",
    )


def test_a_wrong_level_command_under_json_is_one_json_object(monkeypatch, capsys):
    import json

    code, out, _err = _run_main(monkeypatch, capsys, "inspect", "runs/demo", "--json")
    assert code == 2
    assert json.loads(out)["error"].endswith("(did you mean 'mfsdp ckpt inspect'?)")
