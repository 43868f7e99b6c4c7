"""Hostile paths at the layout level: trackers that are not step numbers, special files,
deep chains, symlink loops and symlinks out of the checkpoint. Each is one line and a
non-zero exit, never a hang, a traceback or a byte read from outside the checkpoint."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mfsdp_ckpt.format import checkpoint_resolution, finding_runs, layout
from tests.support.interop_layouts import BUILDERS, one_error_line, run_cli

TRACKERS = {
    "fifo": lambda p: os.mkfifo(p),
    "5000_digits": lambda p: p.write_text("7" * 5000),
    "not_utf8": lambda p: p.write_bytes(b"\xff\xfe40"),
    "superscript_two": lambda p: p.write_text("²"),
    "directory": lambda p: p.mkdir(),
    "symlink_out": lambda p: os.symlink("/etc/hostname", p),
}


@pytest.mark.parametrize("case", list(TRACKERS))
def test_a_hostile_tracker_is_one_line(case, made_optim, tmp_path):
    """Exit 1 (was 2): the run dir is recognisably one, its tracker is damaged data."""
    laid = BUILDERS["verl-sft"](made_optim, tmp_path)
    tracker = laid.run / layout.TRACKER_FILE
    tracker.unlink()
    TRACKERS[case](tracker)
    with pytest.raises(layout.DamagedRunDirError) as caught:
        checkpoint_resolution.resolve_checkpoint(laid.run)
    assert layout.TRACKER_FILE in str(caught.value) and "\n" not in str(caught.value)
    assert "(step dirs here: global_step_40)" in str(caught.value)
    code, out, err = run_cli("ckpt", "validate", laid.run)
    assert code == 1 and layout.TRACKER_FILE in one_error_line(out), out + err  # its finding


def test_a_hostile_ckpt_contents_json_is_one_line(made_optim, tmp_path):
    laid = BUILDERS["verl-rl-v2"](made_optim, tmp_path)
    contents = laid.levels["actor"] / layout.VERL_CONTENTS_FILE
    contents.unlink()
    os.mkfifo(contents)
    code, out, err = run_cli("ckpt", "inspect", laid.run)
    assert code == 1 and "FIFO" in one_error_line(err), out + err


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[" * 100_000, "not valid JSON"),  # RecursionError, which is no ValueError
        ("1" * 5000, "not valid JSON"),  # past Python's int digit limit
        ("[2]", "expected a JSON object, found list"),
        ('{"a": 1, "a": 2}', "appears twice"),
    ],
    ids=["deep", "digits", "list", "twice"],
)
def test_a_malformed_ckpt_contents_json_is_one_line(made_optim, tmp_path, text, says):
    laid = BUILDERS["verl-rl-v2"](made_optim, tmp_path)
    (laid.levels["actor"] / layout.VERL_CONTENTS_FILE).write_text(text)
    code, out, err = run_cli("ckpt", "inspect", laid.run)
    line = one_error_line(err)
    assert code == 1 and layout.VERL_CONTENTS_FILE in line and says in line, out + err


@pytest.fixture
def deep_chains():
    """Chains made by `_deep_chain` are removed one level at a time after the test:
    shutil.rmtree recurses per level and would fail on them in pytest's own cleanup."""
    made: list[Path] = []
    yield made
    for top in made:
        _remove_chain(top)


def _remove_chain(top: Path) -> None:
    link, spare = top / "d", top / ".d-spare"
    while link.is_dir():
        if (link / "d").is_dir():
            os.rename(link / "d", spare)
            os.rmdir(link)
            os.rename(spare, link)
        else:
            os.rmdir(link)


def _deep_chain(top: Path, depth: int) -> Path:
    """`depth` nested dirs made through directory descriptors (the path is too long to name)."""
    fd = os.open(top, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    return top


def test_a_1500_deep_chain_in_the_hf_dir_is_one_line(made_optim, tmp_path, deep_chains):
    laid = BUILDERS["verl-sft"](made_optim, tmp_path)
    deep_chains.append(_deep_chain(laid.levels["step"] / "huggingface", 1500))
    code, out, err = run_cli("ckpt", "export-hf", laid.run, "--out", tmp_path / "hf")
    assert code == 2 and "nested more than" in one_error_line(err), out + err
    assert not (tmp_path / "hf").exists()


def test_a_run_holding_a_1500_deep_chain_is_one_line(tmp_path, deep_chains):
    deep_chains.append(_deep_chain(tmp_path, 1500))
    for given in (tmp_path, tmp_path.joinpath(*["d"] * 1500)):
        code, out, err = run_cli("ckpt", "validate", given)
        assert code == 2 and "not a checkpoint" in one_error_line(err), out + err


def test_a_symlink_loop_in_a_step_dir_is_one_line(made_optim, tmp_path):
    laid = BUILDERS["verl-rl-v1"](made_optim, tmp_path)
    hf = laid.levels["actor"] / "huggingface"
    os.symlink("b", hf / "a")
    os.symlink("a", hf / "b")
    code, out, err = run_cli("ckpt", "export-hf", laid.run, "--out", tmp_path / "hf")
    assert code == 1 and "symlink loop" in one_error_line(err), out + err
    code, out, err = run_cli("ckpt", "validate", laid.levels["step"])  # what export copies
    assert code == 1 and "symlink loop" in out, out + err
    for name in ("a", "b"):
        (hf / name).unlink()
    os.symlink(".", laid.levels["actor"] / "dist_ckpt" / "self")
    assert run_cli("ckpt", "validate", laid.run, "--deep")[0] == 0


@pytest.mark.parametrize("name", ["tokenizer.json", "config.json"])
def test_an_asset_symlinked_out_of_the_checkpoint_is_not_exported(name, made_optim, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("a user's private file")
    if name == "config.json":
        secret.write_text((made_optim / "config.json").read_text())
    laid = BUILDERS["verl-sft"](made_optim, tmp_path / "ckpt")
    target = laid.levels["step"] / "huggingface" / name
    target.unlink(missing_ok=True)
    os.symlink(secret, target)
    code, out, err = run_cli("ckpt", "export-hf", laid.run, "--out", tmp_path / "hf")
    assert code == 1 and "resolves outside the checkpoint" in one_error_line(err), out + err
    assert not (tmp_path / "hf").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".hf.export-")]


def test_a_fifo_among_the_assets_is_refused_without_blocking(made_optim, tmp_path):
    laid = BUILDERS["verl-sft"](made_optim, tmp_path)
    os.mkfifo(laid.levels["step"] / "huggingface" / "tokenizer.json")
    code, out, err = run_cli("ckpt", "export-hf", laid.run, "--out", tmp_path / "hf")
    assert code == 1 and "FIFO" in one_error_line(err), out + err


def test_checkpoint_containing_finds_every_level(made_optim, tmp_path):
    laid = BUILDERS["verl-rl-v2"](made_optim, tmp_path)
    for level, path in laid.levels.items():
        if level != "run":
            assert finding_runs.checkpoint_containing(path / "new" / "out") is not None, level
    assert (
        finding_runs.checkpoint_containing(laid.run / "global_step_80")
        == laid.run / "global_step_80"
    )
    assert finding_runs.checkpoint_containing(tmp_path / "exports" / "hf") is None
    assert finding_runs.checkpoint_containing(laid.run / "hf") is None  # beside the steps: fine
    # the run itself: never replaced
    assert finding_runs.checkpoint_containing(laid.run) == laid.run


def _link_out(piece: Path, elsewhere: Path) -> None:
    """Move `piece` to `elsewhere` and leave a symlink to it where it was."""
    piece.rename(elsewhere)
    os.symlink(elsewhere, piece)


LINKED_OUT = [
    (name, level)
    for name in ("verl-rl-v1", "verl-rl-v2", "verl-sft", "verl-sft-v2", "megatron-lm")
    for level in ("step", "dist_ckpt")
    if not (name == "megatron-lm" and level == "dist_ckpt")  # its iter dir is both
]
RUN_COMMANDS = ("validate", "inspect", "export-hf")


def _run_command(command: str, run: Path, out: Path) -> tuple[int, str, str]:
    args = {"validate": ["--deep"], "export-hf": ["--out", out]}.get(command, [])
    return run_cli("ckpt", command, run, *args)


@pytest.mark.parametrize(("name", "level"), LINKED_OUT)
def test_a_linked_step_dir_is_read_and_a_dcp_dir_linked_out_of_it_is_not(
    name, level, made_optim, tmp_path
):
    """export-hf read a dist_ckpt/ linked out of its step (validate's manifest check alone
    refused it). A step dir linked out of the run dir (a step moved to another disk and
    linked back) is the user's: every command reads it where it leads, as naming the step
    does, where the run dir's readers refused it while the trainer resumed it."""
    laid = BUILDERS[name](made_optim, tmp_path / "ckpt")
    piece = laid.dist_ckpt if level == "dist_ckpt" else laid.levels["step"]
    _link_out(piece, tmp_path / "elsewhere")
    exported = laid.has_hf_config  # Megatron-LM's export asks for --hf-config besides
    for command in RUN_COMMANDS if exported else RUN_COMMANDS[:-1]:
        code, out, err = _run_command(command, laid.run, tmp_path / "hf")
        if level == "step":
            assert code == 0, (command, out, err)
        else:
            assert code == 1, (command, out, err)
            assert "resolves outside" in one_error_line(err)
    assert (tmp_path / "hf").exists() == (level == "step" and exported)
    code, out, err = run_cli("ckpt", "validate", tmp_path / "elsewhere", "--deep")
    assert code == 0, out + err  # named itself, the same directory is read


def test_our_step_linked_out_of_its_run_is_read_and_its_dcp_linked_on_is_not(tmp_path):
    """validate reads a run dir of ours through its own tracker check, which resolved the
    step dir apart from the layout's: both follow the step's link, and keep its reads
    inside where it leads."""
    from tests.support.hf_model_files import saved_hf_model

    model = saved_hf_model(tmp_path, "qwen2", tied=True)
    run = tmp_path / "run"
    assert run_cli("ckpt", "import-hf", model, "--out", run, "--layout", "hf")[0] == 0
    _link_out(run / "global_step_0", tmp_path / "elsewhere")
    for command in RUN_COMMANDS:
        code, out, err = _run_command(command, run, tmp_path / "hf")
        assert code == 0, (command, out, err)
    _link_out(tmp_path / "elsewhere" / "dist_ckpt", tmp_path / "dcp_elsewhere")
    code, out, err = run_cli("ckpt", "export-hf", tmp_path / "elsewhere", "--out", tmp_path / "o")
    assert code == 1 and "dist_ckpt: resolves outside" in one_error_line(err), out + err
