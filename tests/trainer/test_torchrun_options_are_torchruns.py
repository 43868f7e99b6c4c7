"""The torchrun options a launch script is read with (`trainer/torchrun_options.py`) are the
installed torchrun's own: every spelling its parser takes, each taking a value or not as
there. The table stands apart so that reading a script imports no torch; a torch that adds
or renames an option fails here instead of a script's count being misread."""

from __future__ import annotations

from torch.distributed.run import get_args_parser

from trainer.torchrun_options import FLAGS, SHORT, VALUED, read_options, spellings


def _torchrun_table() -> dict[str, tuple[str, bool]]:
    """Each of torchrun's option spellings: its dest and whether it takes a value."""
    parser = get_args_parser()
    parser.add_argument("--use-env", "--use_env", action="store_true")  # torch.distributed.launch
    return {
        spelling: (action.dest, action.nargs != 0)
        for action in parser._actions
        for spelling in action.option_strings
    }


def test_every_spelling_of_torchruns_options_is_read_as_torchrun_reads_it():
    ours = {**spellings(), **SHORT}
    table = {spelling: (dest, dest in VALUED) for spelling, dest in ours.items()}
    theirs = _torchrun_table()
    assert {spelling: table.get(spelling) for spelling in theirs} == theirs
    assert not FLAGS & VALUED


def test_options_are_read_to_the_script_torchrun_runs():
    words = ["--standalone", "--nproc_per_node", "4", "-r3", "--nnodes=2", "-m", "x", "--nnodes=5"]
    read = read_options([(word, word) for word in words])
    assert [(o.dest, o.value) for o in read.options] == [
        ("standalone", ""),
        ("nproc_per_node", "4"),
        ("redirects", "3"),
        ("nnodes", "2"),
        ("module", ""),
    ]
    assert read.unread is None


def test_a_word_torchrun_refuses_ends_the_reading_with_why():
    for word, why in [
        ("--nproc", "ambiguous"),
        ("--no-such-option", "not an option torchrun takes"),
        ("--standalone=1", "given a value"),
    ]:
        read = read_options([(word, word), ("-m", "-m")])
        assert read.unread is not None and why in read.unread[1], (word, read.unread)
