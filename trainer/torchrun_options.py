"""torchrun's command line, for reading a launch script that starts verl through it
(`torchrun --nproc-per-node=8 -m verl.trainer.sft_trainer ...`, `python -m
torch.distributed.run ...`): where its options start among a command's words, and the value
each is given, read as torchrun's argparse parser reads them (`--opt=value` or `--opt value`,
either spelling, a unique prefix, `-r3`).

The options are torchrun's own (torch/distributed/run.py `get_args_parser`, with the
`--use-env` torch/distributed/launch.py adds); tests check this table against the installed
torch, so that reading a script imports no torch (over a second, for a table).
A module of its own: torchrun's grammar, apart from how bash makes the words.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

# torchrun's options that take no value (argparse nargs=0)
FLAGS = frozenset(
    {"help", "standalone", "module", "no_python", "run_path", "virtual_local_rank", "use_env"}
)
# the rest, each taking one value
VALUED = frozenset(
    {
        *("nnodes", "nproc_per_node", "node_rank", "master_addr", "master_port", "local_addr"),
        *("rdzv_backend", "rdzv_endpoint", "rdzv_id", "rdzv_conf"),
        *("max_restarts", "monitor_interval", "start_method", "event_log_handler", "role"),
        *("log_dir", "redirects", "tee", "local_ranks_filter", "logs_specs", "numa_binding"),
        *("duplicate_stdout_filters", "duplicate_stderr_filters"),
        *("signals_to_handle", "shutdown_timeout"),
    }
)
SHORT = {"-h": "help", "-m": "module", "-r": "redirects", "-t": "tee"}
# the modules `python -m` starts torchrun as
LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def spellings() -> dict[str, str]:
    """Every long spelling of torchrun's options, with the value (argparse's dest) it sets:
    `--nproc-per-node` and `--nproc_per_node` alike."""
    table = {}
    for dest in FLAGS | VALUED:
        table["--" + dest] = dest
        table["--" + dest.replace("_", "-")] = dest
    return table


@dataclass(frozen=True)
class Option:
    """One of torchrun's options as a command gives it."""

    dest: str  # argparse's name for it: nproc_per_node
    shown: str  # as torchrun gets it: `--nproc_per_node=8`, `--nnodes 2`, `--node_rank=$RANK`
    value: str  # expanded by the script's variables ("" for a flag)
    written: str  # the word(s) as written that the value came from, for the variables it uses
    known: bool = True  # False: the value holds a reference left as written (`$1`, `$(...)`)


@dataclass
class Torchrun:
    """torchrun's options on a command, in order, and the first word among them that is
    no option torchrun reads (`unread`: the word as written and why), if any: past it, what
    the options are is not known here."""

    options: list[Option] = field(default_factory=list)
    unread: tuple[str, str] | None = None

    def given(self, dest: str) -> Option | None:
        """The option setting `dest`, its last (argparse keeps the last)."""
        found = [option for option in self.options if option.dest == dest]
        return found[-1] if found else None


def launcher_start(words: list[str]) -> int | None:
    """Where torchrun's options start among `words` (a command's words before verl's
    module): past its last `torchrun` (by any path) or `-m torch.distributed.run` (or
    `.launch`); None where the command starts no torchrun."""
    for index in range(len(words) - 1, -1, -1):
        word = words[index]
        if posixpath.basename(word) == "torchrun":
            return index + 1
        if word in LAUNCHER_MODULES and index > 0 and words[index - 1] == "-m":
            return index + 1
    return None


def read_options(words: list[tuple[str, str]]) -> Torchrun:
    """torchrun's options among `words` (each expanded, with the word as written), up to
    the first word that is none (the script or module it runs: verl's, after `-m`). A word
    left holding a reference (`$ARGS`, known only when the script runs) or one torchrun
    refuses ends the reading, named in `unread`."""
    table = spellings()
    read = Torchrun()
    index = 0
    while index < len(words):
        text, written = words[index]
        if not text.startswith("-") and ("$" in text or "`" in text):
            shown = written if text == written else f"{written} ({text})"
            read.unread = (shown, "known only when the script runs")
            break
        if not text.startswith("-") or text == "-" or text == "--":
            break
        dest, value, why = _option(text, table)
        if dest is None:
            read.unread = (written, why)
            break
        if dest in FLAGS or value is not None:
            read.options.append(Option(dest, text, value or "", written, _known(value)))
            index += 1
            continue
        if index + 1 >= len(words):
            read.unread = (written, "missing its value")
            break
        value_text, value_written = words[index + 1]
        read.options.append(
            Option(
                dest,
                f"{text} {value_text}",
                value_text,
                f"{written} {value_written}",
                _known(value_text),
            )
        )
        index += 2
    return read


def _option(text: str, table: dict[str, str]) -> tuple[str | None, str | None, str]:
    """The option `text` (one word) sets, the value given in the same word (`--a=1`,
    `-r3`), None where the next word holds it; or None and why torchrun refuses the word."""
    if not text.startswith("--"):
        dest = SHORT.get(text[:2])
        if dest is None:
            return None, None, "not an option torchrun takes"
        rest = text[2:]
        if dest in FLAGS:
            return (dest, None, "") if not rest else (None, None, "not an option torchrun takes")
        return dest, (rest.removeprefix("=") if rest else None), ""
    name, equals, value = text.partition("=")
    matches = (
        [name] if name in table else [spelling for spelling in table if spelling.startswith(name)]
    )
    if not matches:
        return None, None, "not an option torchrun takes"
    if len(matches) > 1:
        return None, None, f"refused by torchrun as ambiguous ({', '.join(sorted(matches))})"
    dest = table[matches[0]]
    if dest in FLAGS and equals:
        return None, None, "given a value, which torchrun refuses"
    return dest, (value if equals else None), ""


def _known(value: str | None) -> bool:
    """Whether an expanded value is known here: no reference or command left in it."""
    return value is None or not any(mark in value for mark in "$`")
