"""One behaviour across the whole `mfsdp` command surface: an option given at the wrong level
(`mfsdp --json ckpt validate`, `mfsdp ckpt validate PATH -v`) says where it goes, and a usage
error under --json is one JSON object on stdout, whichever way --json was spelled."""

from __future__ import annotations

import json

import click
import pytest

from cli.main import app, main
from tests.support.paths import FIXTURES, REPO
from tests.support.sft import TINY_CONFIG, write_chat_jsonl
from tests.support.terminal import Terminal
from trainer.grpo.synthetic import write_addition_data

GRPO_CONFIG = REPO / "examples" / "grpo_tiny_cpu.yaml"

FSDP_RUN = FIXTURES / "megatron_fsdp_qwen2" / "run"


def _leaves(command: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every runnable command under `command`, as the words that name it."""
    if isinstance(command, click.Group):
        return [
            leaf for name, sub in command.commands.items() for leaf in _leaves(sub, (*path, name))
        ]
    return [path]


def _takes(words: tuple[str, ...], option: str) -> bool:
    command: click.Command = app
    for word in words:
        assert isinstance(command, click.Group)
        command = command.commands[word]
    return any(option in param.opts for param in command.params)


def _run_main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """`mfsdp ARGS` through the real entry point, in this process."""
    monkeypatch.setattr("sys.argv", ["mfsdp", *args])
    with pytest.raises(SystemExit) as stopped:
        main()
    out, err = capsys.readouterr()
    return int(stopped.value.code), out, err


JSON_COMMANDS = [words for words in _leaves(app) if _takes(words, "--json")]
ALL_COMMANDS = _leaves(app)


def test_the_command_surface_is_what_these_tests_cover():
    assert ("ckpt", "validate") in JSON_COMMANDS and ("train", "sft") in JSON_COMMANDS
    assert ("data", "synthetic") in ALL_COMMANDS and len(ALL_COMMANDS) >= 10


@pytest.mark.parametrize("words", JSON_COMMANDS, ids=" ".join)
def test_json_given_before_the_command_says_it_goes_after_it(monkeypatch, capsys, words):
    code, out, err = _run_main(monkeypatch, capsys, "--json", *words)
    assert code == 2
    assert json.loads(out)["exit_code"] == 2
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert "--version" not in err  # click's closest name for --json at the root
    assert "give it after the command name" in err


@pytest.mark.parametrize("words", ALL_COMMANDS, ids=" ".join)
def test_verbose_given_after_the_command_says_it_goes_before_it(monkeypatch, capsys, words):
    code, out, err = _run_main(monkeypatch, capsys, *words, "-v")
    assert code == 2 and out == ""
    assert err == (
        f"error: No such option '-v' for 'mfsdp {' '.join(words)}': it is an option of "
        f"'mfsdp', given before the command (mfsdp -v {' '.join(words)} ...); "
        f"see 'mfsdp {' '.join(words)} --help'\n"
    )


def test_an_option_of_a_nested_group_level_names_that_level(monkeypatch, capsys):
    code, _out, err = _run_main(monkeypatch, capsys, "ckpt", "--deep", "validate", "x")
    assert code == 2
    assert "give it after the command name (mfsdp ckpt validate ... --deep)" in err


@pytest.mark.parametrize("words", JSON_COMMANDS, ids=" ".join)
def test_json_spelled_with_a_value_still_answers_in_json(monkeypatch, capsys, words):
    code, out, err = _run_main(monkeypatch, capsys, *words, "--json=yes")
    assert code == 2
    said = f"Option '--json' does not take a value; see 'mfsdp {' '.join(words)} --help'"
    assert json.loads(out) == {"error": said, "exit_code": 2}
    assert err == f"error: {said}\n"


def test_json_with_no_command_names_one_that_takes_it(monkeypatch, capsys):
    code, out, err = _run_main(monkeypatch, capsys, "--json")
    assert code == 2 and json.loads(out)["exit_code"] == 2
    assert err == (
        "error: No such option '--json' for 'mfsdp': give it after the command name "
        f"(mfsdp {' '.join(JSON_COMMANDS[0])} ... --json); see 'mfsdp --help'\n"
    )


def _data_args(name: str, tmp_path) -> list[str]:
    """`mfsdp data NAME` on a one-row official file (synthetic makes its own)."""
    if name == "synthetic":
        return ["data", "synthetic", "--out", str(tmp_path / "out")]
    row = (
        {"question": "1 + 2?", "answer": "1 + 2 = 3\n#### 3"}
        if name == "gsm8k"
        else {"problem": "1 + 2?", "solution": "$\\boxed{3}$"}
    )
    source = tmp_path / "train.jsonl"
    source.write_text(json.dumps(row) + "\n")
    return ["data", name, "--input", str(source), "--out", str(tmp_path / "out")]


@pytest.mark.parametrize("name", ["gsm8k", "math", "synthetic"])
def test_data_commands_print_the_tables_as_one_json_object(monkeypatch, capsys, tmp_path, name):
    monkeypatch.setattr("sys.argv", ["mfsdp", *_data_args(name, tmp_path), "--json"])
    main()
    out, _err = capsys.readouterr()
    printed = json.loads(out)
    assert printed["out_dir"] == str(tmp_path / "out")
    assert {"sft/train", "rl/train"} <= set(printed["files"])
    for table, path in printed["files"].items():
        assert path == str(tmp_path / "out" / f"{table}.parquet")


@pytest.mark.parametrize("name", ["gsm8k", "math", "synthetic"])
def test_data_commands_name_their_tables_alike_without_json(monkeypatch, capsys, tmp_path, name):
    monkeypatch.setattr("sys.argv", ["mfsdp", *_data_args(name, tmp_path)])
    main()
    out, _err = capsys.readouterr()
    names = [line.split(": ", 1)[0] for line in out.splitlines()]
    assert names[:2] == ["sft/train", "rl/train"]


@pytest.mark.parametrize("name", ["gsm8k", "math"])
def test_a_data_command_failing_under_json_prints_the_error_object(
    monkeypatch, capsys, tmp_path, name
):
    args = _data_args(name, tmp_path)
    args[args.index("--input") + 1] = str(tmp_path / "absent.jsonl")
    code, out, err = _run_main(monkeypatch, capsys, *args, "--json")
    assert code == 2
    assert json.loads(out) == {
        "error": f"{tmp_path / 'absent.jsonl'}: no such file or directory",
        "exit_code": 2,
    }
    assert err == f"error: {tmp_path / 'absent.jsonl'}: no such file or directory\n"


def _long_commands(tmp_path) -> dict[str, list[str]]:
    """The commands that show progress, each on the tiny Megatron-FSDP fixture run."""
    exported = tmp_path / "hf"
    return {
        "validate": ["ckpt", "validate", str(FSDP_RUN), "--deep"],
        "export": ["ckpt", "export-hf", str(FSDP_RUN), "--out", str(exported)],
        "import": ["ckpt", "import-hf", str(exported), "--out", str(tmp_path / "back")],
    }


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_progress_bars_are_labelled_on_a_terminal_and_on_stderr_under_json(
    monkeypatch, capsys, tmp_path, as_json
):
    for label, args in _long_commands(tmp_path).items():
        terminal = Terminal()
        monkeypatch.setattr("sys.stderr", terminal)
        monkeypatch.setattr("sys.argv", ["mfsdp", *args, *(["--json"] if as_json else [])])
        main()
        out, _ = capsys.readouterr()
        bars = [line for line in terminal.getvalue().split("\r") if "%|" in line]
        if as_json:  # stdout keeps its one object
            assert isinstance(json.loads(out), dict), label
        # `validate:`, or a phase of it labelled after the command (`validate hashes:`)
        labelled = [bar for bar in bars if bar.startswith((f"{label}:", f"{label} "))]
        assert bars and labelled == bars, (label, bars)


def test_no_progress_bar_when_stderr_is_not_a_terminal(monkeypatch, capsys, tmp_path):
    for args in _long_commands(tmp_path).values():
        monkeypatch.setattr("sys.argv", ["mfsdp", *args])
        main()
        _out, err = capsys.readouterr()
        assert "\r" not in err and "%|" not in err, err


def _train_sft_args(tmp_path) -> list[str]:
    data = write_chat_jsonl(tmp_path / "train.jsonl", rows=16)
    return [
        *("train", "sft", "--config", str(TINY_CONFIG), "--json"),
        *(f"data.train_files={data}", f"trainer.run_dir={tmp_path / 'run'}", "data.val_ratio=0"),
        *("trainer.total_steps=2", "data.global_batch_size=8", "trainer.log_every=1"),
    ]


def test_training_into_a_log_draws_no_bars_but_says_each_step(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("sys.argv", ["mfsdp", *_train_sft_args(tmp_path)])
    main()
    out, err = capsys.readouterr()
    assert json.loads(out)["final_step"] == 2
    assert "\r" not in err and "%|" not in err, err
    assert "[sft] step 2/2 loss=" in err


def test_training_on_a_terminal_draws_its_step_bar(monkeypatch, capsys, tmp_path):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    # wide enough for the bar graphic beside every figure, whatever tok/s's digits: a
    # terminal of no size is drawn at COLUMNS (at the 80 columns assumed without it, a fast
    # machine's 5-digit tok/s left no room for the graphic)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr("sys.argv", ["mfsdp", *_train_sft_args(tmp_path)])
    main()
    out, _ = capsys.readouterr()
    assert json.loads(out)["final_step"] == 2
    assert "sft: 100%|" in terminal.getvalue() and "[sft] step" not in terminal.getvalue()


def test_grpo_into_a_log_says_each_step_as_sft_does(monkeypatch, capsys, tmp_path):
    files = write_addition_data(tmp_path / "data", digits=4)
    monkeypatch.setattr(
        "sys.argv",
        [
            *("mfsdp", "train", "grpo", "--config", str(GRPO_CONFIG), "--json"),
            *(f"data.train_files={files['rl_train']}", f"trainer.run_dir={tmp_path / 'run'}"),
            *("data.val_files=[]", "trainer.total_steps=2", "trainer.log_every=1"),
            *("data.train_batch_size=4", "rollout.n=2", "rollout.max_response_length=4"),
            *("actor.ppo_mini_batch_size=2", "actor.ppo_micro_batch_size_per_gpu=2"),
            *("actor.log_prob_micro_batch_size_per_gpu=2", "rollout.name=hf"),
        ],
    )
    main()
    out, err = capsys.readouterr()
    assert json.loads(out)["final_step"] == 2
    assert "\r" not in err and "%|" not in err, err
    assert "[grpo] step 1/2 reward=" in err and "[grpo] step 2/2 reward=" in err
