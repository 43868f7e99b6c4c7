"""One option, one spelling and one wording in every command:

- `--force` and `-f` (most tools' spelling of it) are told `--overwrite`, as `--output` and
  `-o` are told `--out`; they got click's bare "No such option".
- `--out` is `--out DIR` in every command's help (export-hf said DIR, the others DIRECTORY).
- `--json` is described the same way everywhere (five wordings for one behaviour).
- An option given without its value gets the `; see '... --help'` every other usage error
  ends with (click raises that one without its command).
"""

from __future__ import annotations

import re

import click
import pytest

from cli.main import app, main


def _leaves(command: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(command, click.Group):
        return [
            leaf for name, sub in command.commands.items() for leaf in _leaves(sub, (*path, name))
        ]
    return [path]


def _command(words: tuple[str, ...]) -> click.Command:
    command: click.Command = app
    for word in words:
        assert isinstance(command, click.Group)
        command = command.commands[word]
    return command


def _option(words: tuple[str, ...], name: str) -> click.Option | None:
    return next(
        (p for p in _command(words).params if isinstance(p, click.Option) and name in p.opts),
        None,
    )


def _with(name: str) -> list[tuple[str, ...]]:
    return [words for words in _leaves(app) if _option(words, name) is not None]


def _run_main(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr("sys.argv", ["mfsdp", *args])
    with pytest.raises(SystemExit) as stopped:
        main()
    return int(stopped.value.code), capsys.readouterr().err


def test_out_is_dir_in_every_command():
    commands = _with("--out")
    assert len(commands) >= 5, commands  # demo, export-hf, import-hf, the data commands
    for words in commands:
        option = _option(words, "--out")
        assert option is not None
        assert option.make_metavar(click.Context(_command(words))) == "DIR", words


def test_json_is_described_alike_in_every_command():
    commands = _with("--json")
    assert len(commands) >= 6, commands
    shapes = set()
    for words in commands:
        option = _option(words, "--json")
        assert option is not None and option.help
        shapes.add(re.sub(r"^Print the .+? as ", "Print the ... as ", option.help))
    assert shapes == {
        "Print the ... as one JSON object on stdout (a failure as {error, exit_code})."
    }


@pytest.mark.parametrize("given", ["--force", "-f"])
@pytest.mark.parametrize("words", _with("--overwrite"), ids=" ".join)
def test_force_is_told_overwrite(monkeypatch, capsys, words, given):
    code, err = _run_main(monkeypatch, capsys, *words, given)
    assert code == 2, err
    assert f"No such option '{given}'" in err and "(did you mean '--overwrite'?)" in err, err


@pytest.mark.parametrize(
    "args",
    [("ckpt", "inspect", ".", "--role"), ("ckpt", "validate", ".", "--hf-config")],
    ids=" ".join,
)
def test_an_option_without_its_value_names_the_help_to_read(monkeypatch, capsys, args):
    code, err = _run_main(monkeypatch, capsys, *args)
    assert code == 2, err
    path = " ".join(["mfsdp", *args[:2]])
    assert err == f"error: Option '{args[-1]}' requires an argument; see '{path} --help'\n"
