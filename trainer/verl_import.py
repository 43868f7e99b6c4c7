"""A verl run (its launch script or its YAML config) as an mfsdp config, for `mfsdp config
from-verl`: what carries over, under which mfsdp key, and what does not and why.

The key table is `trainer.verl_keys`; this module only finds the `key=value` pairs (in a
shell script: the arguments of `python3 -m verl.trainer.main_ppo` or of verl's SFT trainer,
backslash continuations joined, simple `NAME=value` variables substituted, bash arrays
`NAME=( ... )` spread where `"${NAME[@]}"` stands) and reports.
Nothing in the script is executed.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mfsdp_ckpt.check.printable import printable
from mfsdp_ckpt.errors import MfsdpFailedError, MfsdpUsageError
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from trainer import shell_arithmetic, verl_hydra_files, verl_interpolation, verl_keys
from trainer.config_kind import likely_kind
from trainer.config_yaml import ExpansionBudget, YAMLConfigError, parse_yaml
from trainer.local_paths import UNEXPANDED

MAX_SOURCE_BYTES = 1 << 20  # launch scripts and configs are a few KiB
# A launch command, continuations joined, is a few KiB; shlex builds each word a character at
# a time (quadratic: a 1 MiB word took 25 s), so a longer line is refused before it splits.
MAX_LINE_CHARS = 64 << 10
# What `$NAME` substitutions may copy, all told: each copies the value, so assignments that
# double one (`B=$A$A`, `C=$B$B`, ...) grow it 2**lines ("billion laughs" in 40 lines).
MAX_EXPANDED_CHARS = 4 * MAX_SOURCE_BYTES
GRPO_MODULES = ("verl.trainer.main_ppo",)
SFT_MODULES = ("verl.trainer.fsdp_sft_trainer", "verl.trainer.sft_trainer")
_VARIABLE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
# `$(...)` and backquotes hold a command whose words shlex splits apart
# (`experiment_name=run_$(date +%s)` became `run_$(date`): kept whole as text, never run
_COMMAND_SUBSTITUTION = re.compile(r"\$\([^()]*\)|`[^`]*`")
_NESTING = 4  # substitutions nested deeper than a launch script's are split as shlex splits
_HELD = "\ue000"  # a private-use character marks a held substitution while shlex splits
_LITERAL_DOLLAR = "\ue001"  # a `$` inside single quotes: bash passes it as it is
# `${1:-vllm}`: a positional parameter (the script's own argument) is matched for its default;
# a default may hold `${OTHER}` (`${TRAIN_FILE:-${DATA_HOME}/train.parquet}`): braces one deep
_REFERENCE = re.compile(
    r"\$\{([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(?::-((?:[^{}]|\{[^{}]*\})*))?\}"
    r"|\$([A-Za-z_][A-Za-z0-9_]*)"
)
# verl's newer examples group their overrides in bash arrays: `DATA=(` ... `)` then
# `"${DATA[@]}"` in the command (read as no keys at all, the config came out `{}` at exit 0)
_ARRAY_START = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=\((.*)$")
_ARRAY_SPREAD = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\[[@*]\]\}$")
# the script's own arguments passed on to verl: more overrides, known only when it runs
_FORWARDED = ("$@", "$*", "${@}", "${*}")


class VerlSourceError(MfsdpUsageError, ValueError):
    """The file is not a verl launch script or YAML config this can read; names the file."""


class VerlMemoryError(MfsdpFailedError):
    """Converting the file ran out of memory (exit 1); names the file."""


@contextlib.contextmanager
def _memory_named(source: str | Path) -> Iterator[None]:
    """An allocation failing inside the block (a process under `ulimit -v`) is one line
    naming `source`, not a bare MemoryError that says neither which file nor why."""
    try:
        yield
    except MemoryError:
        raise VerlMemoryError(
            f"{source}: out of memory converting it; free memory or raise the process's limit"
            " (ulimit -v)"
        ) from None


@dataclass
class Conversion:
    command: str  # sft | grpo
    tree: dict[str, Any]  # the mfsdp config (nested sections)
    notes: list[str] = field(default_factory=list)  # how verl keys were carried over
    dropped: list[str] = field(default_factory=list)  # "key=value: why not" for keys not carried
    # what the config still needs from the user before training, each named in a note: a
    # value holding shell syntax (`run_dir: $2`), a config file of the user's Hydra merges
    incomplete: list[str] = field(default_factory=list)

    def to_yaml(self, source: str) -> str:
        """The config as YAML under comment lines of notes. The notes quote the source's
        values: escaped (`printable`), as a newline in one would end its comment and write
        the rest as keys of the config."""
        comments = [f"mfsdp train {self.command} --config THIS_FILE   (converted from {source})"]
        comments += self.notes + [f"NOT carried over: {item}" for item in self.dropped]
        with _memory_named(source):
            lines = [f"# {printable(comment)}" for comment in comments]
            body = yaml.safe_dump(self.tree, sort_keys=False) if self.tree else "{}\n"
            return "\n".join(lines) + "\n" + body


def convert_verl(path: str | Path, command: str | None = None) -> Conversion:
    """Read a verl launch script or YAML config at `path` as an mfsdp config for `command`
    (sft | grpo; None: from the script's module or the YAML's sections)."""
    with _memory_named(path):
        return _convert_source(Path(path), command)


def _convert_source(source: Path, command: str | None) -> Conversion:
    raw = _read_source(source)
    if len(raw) > MAX_SOURCE_BYTES:
        raise VerlSourceError(
            f"{source}: larger than {MAX_SOURCE_BYTES // 1024} KiB; not a launch script or config"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise VerlSourceError(f"{source}: not UTF-8 text") from None
    tree: dict[str, Any] = {}
    script_notes: list[str] = []
    incomplete: list[str] = []
    if source.suffix.lower() in (".yaml", ".yml"):
        tree, defaults = _yaml_tree(text, source)
        command = command or likely_kind(tree)  # as `mfsdp train` tells them apart
        script_notes, incomplete = _defaults_notes(defaults, command)
        script_notes += _interpolation_notes(tree, source)
        tree, pairs = verl_keys.split_foreign(_config_class(command), tree)
    else:
        pairs, found, script_notes, incomplete = _script_pairs(text, source)
        command = command or found
    estimator = dict(pairs).get(
        "algorithm.adv_estimator", tree.get("algorithm", {}).get("adv_estimator", "grpo")
    )
    if command == "grpo" and estimator != "grpo":
        raise VerlSourceError(
            f"{source}: algorithm.adv_estimator={estimator}; mfsdp trains GRPO only"
        )
    conversion = _convert(tree, pairs, command, str(source))
    conversion.notes += script_notes
    conversion.incomplete = incomplete + conversion.incomplete
    return conversion


def _read_source(source: Path) -> bytes:
    """The file's first MAX_SOURCE_BYTES + 1 bytes. Only a regular file is read: a FIFO
    (`<(...)`, a named pipe nobody writes to) blocked the command forever, and a device
    never ends; the descriptor is opened without blocking and checked again."""
    try:
        fd = safe_files.open_regular(source)
    except CheckpointFileError as err:
        raise VerlSourceError(str(err)) from None
    with os.fdopen(fd, "rb") as handle:
        try:
            return handle.read(MAX_SOURCE_BYTES + 1)
        except OSError as err:
            raise VerlSourceError(f"{source}: cannot read ({err.strerror})") from None


def _config_class(command: str) -> type:
    from trainer.config import SFTConfig
    from trainer.grpo.config import GRPOConfig

    return GRPOConfig if command == "grpo" else SFTConfig


def _parse(text: str, source: str, budget: ExpansionBudget) -> Any:
    """YAML through the config files' bounded reader (no tags, no alias bombs, no more text
    as walked than `budget` leaves); a mistake is one line naming `source` and where in the
    text it is."""
    try:
        return parse_yaml(text, source, budget)
    except YAMLConfigError as err:
        raise VerlSourceError(str(err)) from None


def _yaml_tree(text: str, source: Path) -> tuple[dict[str, Any], list[Any]]:
    """The YAML's keys, and its Hydra `defaults:` list (the files merged into it: not keys)."""
    tree = _parse(text, str(source), ExpansionBudget())
    if not isinstance(tree, dict):
        raise VerlSourceError(f"{source}: top level must be a mapping of sections")
    defaults = tree.pop("defaults", None)
    return tree, defaults if isinstance(defaults, list) else []


def _defaults_notes(defaults: list[Any], command: str) -> tuple[list[str], list[str]]:
    """Notes on the files a YAML's `defaults:` list merges into it, and the entries naming
    files of the user's, whose settings this conversion has not (`verl_hydra_files`)."""
    verl = [entry for entry in defaults if verl_hydra_files.is_verl_default(entry)]
    own = [verl_hydra_files.shown_entry(entry) for entry in defaults if entry not in verl]
    shown = [verl_hydra_files.shown_entry(entry) for entry in verl if entry != "_self_"]
    notes = []
    if shown:
        notes.append(f"defaults: {', '.join(shown)}: {_verl_defaults_words(command)}")
    if own:
        notes.append(
            f"defaults: {', '.join(own)}: Hydra merges those files of yours into this one"
            " first; their settings are not in this config: convert them with `mfsdp config"
            " from-verl FILE.yaml` and merge the two"
        )
    return notes, [f"defaults: {entry}" for entry in own]


def _verl_defaults_words(command: str) -> str:
    """What a config file of verl's own that Hydra merges in means for the conversion."""
    return (
        "verl's own config, whose settings are verl's defaults: as for every key the run does"
        f" not set, mfsdp's defaults stand (`mfsdp config defaults {command}` lists them)"
    )


def _interpolation_notes(tree: dict[str, Any], source: Path) -> list[str]:
    """Fill in the `${a.b}` references between the YAML's keys, as verl's OmegaConf does; a
    note names the keys filled in."""
    try:
        filled = verl_interpolation.resolve(tree, MAX_EXPANDED_CHARS)
    except verl_interpolation.InterpolationTooLarge as err:
        raise VerlSourceError(f"{source}: {err}") from None
    if not filled:
        return []
    return [
        f"{', '.join(filled)}: ${{...}} references to other keys of this file filled in, as"
        " verl's OmegaConf does"
    ]


def _script_pairs(
    text: str, source: Path
) -> tuple[list[tuple[str, Any]], str, list[str], list[str]]:
    """The `key=value` arguments of the script's (last) verl trainer command, the trainer,
    notes on what of the command is known only when the script runs, and the config file of
    the user's it names (`_hydra_config_notes`)."""
    variables = _Variables(source)
    found: tuple[str, list[str]] | None = None
    launches = 0
    array: _Array | None = None  # a bash array being read, over lines
    for line in text.replace("\\\r\n", " ").replace("\\\n", " ").splitlines():
        if len(line) > MAX_LINE_CHARS:
            raise VerlSourceError(
                f"{source}: a line of {len(line)} characters (continuations joined) starting "
                f"{line[:40]!r}, more than the {MAX_LINE_CHARS} a launch command needs"
            )
        try:
            words = _shell_words(line)
        except ValueError:
            continue  # an unbalanced quote: not a line this reads
        if array is None and words and (start := _ARRAY_START.match(words[0])):
            array = _Array(start.group(1), start.group(2) == "+")
            words = [start.group(3), *words[1:]] if start.group(3) else words[1:]
        if array is not None:
            if array.read(words):
                variables.assign_array(array.name, array.items, array.append)
                array = None
            continue
        assignment = words[1:] if words[:1] == ["export"] else words
        if len(assignment) == 1 and (match := _VARIABLE.match(assignment[0])):
            variables.assign(match.group(1), match.group(2))
            continue
        for module in GRPO_MODULES + SFT_MODULES:
            if module in words:
                launches += 1
                found = (
                    "grpo" if module in GRPO_MODULES else "sft",
                    words[words.index(module) + 1 :],
                )
    if found is None:
        raise VerlSourceError(
            f"{source}: no `python3 -m verl.trainer.main_ppo ...` or verl SFT trainer "
            "command found (or give a verl YAML config)"
        )
    command, words = found
    notes: list[str] = []
    if launches > 1:
        notes.append(
            f"the script starts verl {launches} times; this config is its last command's:"
            " convert the others from a script of their own"
        )
    hydra_notes, incomplete = _hydra_config_notes(words, command)
    notes += hydra_notes
    cls = _config_class(command)
    taken: list[str] = []  # environment variables put into path values
    texts = []  # every value substituted before any is parsed: a substitution bomb is
    for word in variables.spread(words, notes):  # refused before YAML reads megabytes
        if word in _FORWARDED:
            notes.append(
                f"{word}: the script passes its own arguments on to verl; the overrides it is "
                "run with are not in this config: add them to it"
            )
            continue
        key, sep, value = word.partition("=")
        if sep and not key.startswith("-"):
            text = variables.substitute(value)
            if _names_a_path(cls, key):
                text = variables.from_environment(text, taken)
            texts.append((key, _literal(text)))
    pairs = []
    # the values make one config: one budget for them all, as large as the script's
    # variables may make them (each value's aliases count as often as they are used)
    budget = ExpansionBudget(max_chars=MAX_EXPANDED_CHARS)
    for key, text_value in texts:
        if _COMMAND_SUBSTITUTION.search(text_value):  # the shell's output, text here
            parsed: Any = text_value
        else:
            parsed = _parse(text_value, f"{source}: {key}", budget) if text_value.strip() else None
        pairs.append((key, parsed))
    taken_notes = [
        f"${name}: taken from this environment, as the shell running the script here would"
        for name in taken
    ]  # named, never quoted: the config is a file people share
    return pairs, command, [*variables.notes, *taken_notes, *notes], incomplete


# Hydra's options that name the YAML a verl command starts from (`--config-path=DIR`,
# `--config-name NAME`): its keys are not on the command line
_HYDRA_CONFIG_OPTIONS = ("--config-path", "--config-name", "-cp", "-cn")


def _hydra_config_notes(words: list[str], command: str) -> tuple[list[str], list[str]]:
    """A note on the YAML the command loads with Hydra's --config-path / --config-name and,
    for a file of the user's, those options again: its settings are not in this conversion
    (they were left out without a word, then named at exit 0). verl's own configs hold
    verl's defaults (`verl_hydra_files`), which need nothing carried."""
    given: dict[str, str] = {}
    for index, word in enumerate(words):
        option, sep, value = word.partition("=")
        if option in _HYDRA_CONFIG_OPTIONS:
            given[option] = value if sep else (words[index + 1] if index + 1 < len(words) else "")
    if not given:
        return [], []
    path = given.get("--config-path", given.get("-cp"))
    name = given.get("--config-name", given.get("-cn"))
    shown = ", ".join(f"{option} {value}".strip() for option, value in given.items())
    if verl_hydra_files.is_verl_config(path, name):
        return [f"{shown}: {_verl_defaults_words(command)}"], []
    return [
        f"{shown}: verl loads its settings from that YAML first; they are not in"
        " this config: convert it with `mfsdp config from-verl FILE.yaml` and merge the two"
    ], [shown]


@dataclass
class _Array:
    """A bash array assignment `NAME=(` (or `NAME+=(`) read word by word up to its `)`."""

    name: str
    append: bool
    items: list[str] = field(default_factory=list)

    def read(self, words: list[str]) -> bool:
        """Take one line's words; True once the closing `)` is read."""
        for word in words:
            if word.endswith(")"):
                self.items += [word[:-1]] if word[:-1] else []
                return True
            self.items.append(word)
        return False


def _without_comment(line: str) -> str:
    """`line` up to its comment: a `#` outside quotes at the start of a word, as the shell
    reads it (shlex's `comments=True` cut at any `#`, so `experiment_name=run#2` lost the
    rest of a continued command)."""
    quote = ""
    escaped = False
    for index, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index]
    return line


def _shell_words(line: str) -> list[str]:
    """shlex's words of `line`, each command substitution in it one piece of text."""
    if _HELD in line:
        return shlex.split(_without_comment(line))
    held: list[str] = []

    def hold(match: re.Match) -> str:
        held.append(match.group(0))
        return f"{_HELD}{len(held) - 1}{_HELD}"

    line = _single_quoted_dollars(line)
    line = shell_arithmetic.ARITHMETIC.sub(hold, line)  # `$((1024 * 2))` is one word too
    for _ in range(_NESTING):  # innermost first; each pass reads the whole line
        line = _COMMAND_SUBSTITUTION.sub(hold, line)
    marker = re.compile(f"{_HELD}([0-9]+){_HELD}")

    def restore(text: str) -> str:
        for _ in range(_NESTING):
            text = marker.sub(lambda m: held[int(m.group(1))], text)
        return text

    return [restore(word) for word in shlex.split(_without_comment(line))]


def _single_quoted_dollars(line: str) -> str:
    """`line` with each `$` inside single quotes marked literal: bash expands nothing there
    (`'name=run_$LR'` is passed as written), so neither may the substitutions that follow;
    `_literal` restores them once the values are made."""
    out, quote = [], None
    for char in line:
        if quote is None and char in "'\"":
            quote = char
        elif char == quote:
            quote = None
        out.append(_LITERAL_DOLLAR if char == "$" and quote == "'" else char)
    return "".join(out)


def _literal(text: str) -> str:
    """A value with single-quoted `$` restored (`_single_quoted_dollars`)."""
    return text.replace(_LITERAL_DOLLAR, "$")


class _Variables:
    """The script's own `NAME=value` assignments, substituted as `$NAME`, `${NAME}` and
    `${NAME:-default}` into later ones and into the command's words, else the environment's
    (`$HOME`, as the shell running the script here would), with a note; others stay as
    written. At most MAX_EXPANDED_CHARS are copied in all."""

    def __init__(self, source: Path):
        self.source = source
        self.values: dict[str, str] = {}
        self.arrays: dict[str, list[str]] = {}
        self.notes: list[str] = []  # defaults of the script's arguments used
        self.copied = 0

    def assign(self, name: str, value: str) -> None:
        self.values[name] = self.substitute(value)

    def assign_array(self, name: str, words: list[str], append: bool) -> None:
        words = [self.substitute(word) for word in words]
        self.arrays[name] = (self.arrays.get(name, []) if append else []) + words

    def spread(self, words: list[str], notes: list[str]) -> list[str]:
        """`words` with each `${NAME[@]}` replaced by the array's words (an array the
        script does not set is named in `notes`), counted against MAX_EXPANDED_CHARS."""
        spread: list[str] = []
        for word in words:
            match = _ARRAY_SPREAD.match(word)
            if match is None:
                spread.append(word)
            elif match.group(1) in self.arrays:
                items = self.arrays[match.group(1)]
                self._count(match.group(1), sum(len(item) for item in items))
                spread += items
            else:
                notes.append(f"{word}: an array the script does not set; its keys are not here")
        return spread

    def _count(self, name: str, chars: int) -> None:
        self.copied += chars
        if self.copied > MAX_EXPANDED_CHARS:  # before the copy is made
            raise VerlSourceError(
                f"{self.source}: ${name}: variables expand to more than "
                f"{MAX_EXPANDED_CHARS} characters; not a launch script"
            )

    def substitute(self, value: str) -> str:
        def replace(match: re.Match) -> str:
            name = match.group(1) or match.group(3)
            if name not in self.values:
                default = match.group(2)
                if default is not None and name.isdigit():
                    self.notes.append(
                        f"{match.group(0)}: the script's argument ${name}; its default "
                        f"{default!r} is used here"
                    )
                if default is None:
                    return match.group(0)
                return self.substitute(default)
            self._count(name, len(self.values[name]))
            return self.values[name]

        def calculate(match: re.Match) -> str:
            result = shell_arithmetic.evaluate(match.group(1), self.values)
            return match.group(0) if result is None else str(result)

        return shell_arithmetic.ARITHMETIC.sub(calculate, _REFERENCE.sub(replace, value))

    def from_environment(self, value: str, taken: list[str]) -> str:
        """`value` (substituted already) with the references the script leaves unset taken
        from this environment (`$HOME`), as the shell running it here would: a config file
        expands none, so the path must be written out. Only the value of a path key comes
        here (`_names_a_path`): a script's `wandb login $WANDB_API_KEY`, a key not carried
        over, or `trainer.project_name=$GITHUB_TOKEN` (sent on to the trackers) must not put
        a secret into the config. `taken` gets each name used."""

        def replace(match: re.Match) -> str:
            name = match.group(1) or match.group(3)
            if name in self.values or name not in os.environ:
                return match.group(0)
            self._count(name, len(os.environ[name]))
            if name not in taken:
                taken.append(name)
            return os.environ[name]

        return _REFERENCE.sub(replace, value)


@functools.cache
def _path_keys(cls: type) -> frozenset[str]:
    """The keys of `cls` that name a file or directory (`LocalPath` fields: model.path,
    data.train_files, trainer.run_dir, checkpoint.resume, ...)."""
    from trainer.config import path_values

    return frozenset(key for key, _value in path_values(cls()))


def _names_a_path(cls: type, given: str) -> bool:
    """Whether the verl or mfsdp key `given` sets a path key of `cls` (verl's
    `actor_rollout_ref.model.path`, `model.partial_pretrain`, `trainer.default_local_dir`,
    `trainer.resume_from_path` too): the values an environment variable may fill in."""
    key = given.lstrip("+")
    rule = verl_keys.RULES.get(key)
    if key == "trainer.resume_from_path":  # read with resume_mode as checkpoint.resume
        key = "checkpoint.resume"
    elif rule is not None:
        key = rule.target or ""
    return key in _path_keys(cls)


def _convert(
    tree: dict[str, Any], pairs: list[tuple[str, Any]], command: str, source: str
) -> Conversion:
    """`tree` (keys already mfsdp's) plus `pairs` carried over one by one, so one key that
    cannot be carried is reported without stopping the rest; the result is checked whole."""
    from trainer.config import ConfigError, config_from_tree, config_to_dict, set_dotted

    cls = _config_class(command)
    conversion = Conversion(command, tree)
    collected = _Collect()
    log = logging.getLogger("mfsdp.config")
    log.addHandler(collected)
    propagate, log.propagate = log.propagate, False
    try:
        resume = [
            pair for pair in pairs if pair[0] in ("trainer.resume_mode", "trainer.resume_from_path")
        ]
        groups = [[pair] for pair in pairs if pair not in resume] + ([resume] if resume else [])
        for group in groups:
            shown = ", ".join(f"{key}={value}" for key, value in group)
            try:
                adopted = verl_keys.adopt_pairs(cls, group, source)
            except ConfigError as err:
                conversion.dropped.append(f"{shown}: {str(err).split(': ', 2)[-1]}")
                continue
            for key, value in adopted:
                if verl_keys.is_native(cls, key):
                    set_dotted(conversion.tree, key, value)
                else:
                    conversion.dropped.append(f"{key}={value}: no such key here")
    finally:
        log.removeHandler(collected)
        log.propagate = propagate
    conversion.notes = [message.removeprefix("note: ") for message in collected.messages]
    conversion.dropped += _drop_unresolved_typed(cls, conversion.tree, source)
    conversion.notes += [
        f"{key}: null in verl, the mfsdp default stays" for key in _drop_nulls(conversion.tree)
    ]
    try:
        built = config_to_dict(config_from_tree(cls, conversion.tree, source))
    except ConfigError as err:
        raise VerlSourceError(str(err)) from None
    conversion.tree = _typed(conversion.tree, built)  # 1e-6 as a number, 0 as 0.0 where floats go
    paths = _path_keys(cls)
    for key, value in _leaves(conversion.tree):
        if UNEXPANDED.search(str(value)):  # written as it is, which training refuses in a path
            conversion.notes.append(f"{key}={value}: {_unresolved(str(value), key in paths)}")
            conversion.incomplete.append(f"{key}={value}")
    return conversion


def _drop_unresolved_typed(cls: type, tree: dict[str, Any], source: str) -> list[str]:
    """Remove from `tree` the values still holding shell syntax (`${LEN}` from an argument,
    an environment variable, a command) where the key takes a number or a flag: one such
    failed the whole conversion; each is reported as not carried over instead."""
    from trainer.config import ConfigError, config_from_tree, set_dotted

    dropped = []
    for key, value in _leaves(tree):
        if not (isinstance(value, str) and ("$" in value or "`" in value)):
            continue
        alone: dict[str, Any] = {}
        set_dotted(alone, key, value)
        try:
            config_from_tree(cls, alone, source)
        except ConfigError as err:
            *sections, leaf = key.split(".")
            section = tree
            for name in sections:
                section = section[name]
            del section[leaf]
            why = str(err).split(": ", 1)[-1]
            dropped.append(f"{key}={value}: known only when the script runs ({why}): set it here")
    _drop_empty(tree)
    return dropped


def _drop_empty(tree: dict[str, Any]) -> None:
    for key in list(tree):
        if isinstance(tree[key], dict):
            _drop_empty(tree[key])
            if not tree[key]:
                del tree[key]


def _unresolved(value: str, is_path: bool) -> str:
    """What a value still holding shell syntax needs from the user (`is_path`: its key names
    a file or directory, which alone takes a variable's value from this environment)."""
    if "$(" in value or "`" in value:
        return "a shell command substitution, not run here: edit the value"
    if re.search(r"\$\{?[0-9@*#]", value):  # `save_path=$2`: what the script is run with
        return "an argument the script is run with: edit the value"
    if re.search(r"\$[?$!-]", value):
        return "a shell special parameter, known only when the script runs: edit the value"
    if re.search(r"\$\{[^}:]*\.", value):  # a dotted name: OmegaConf's, never the shell's
        return (
            "an OmegaConf interpolation (a resolver, or a key not in the file), which a config"
            " does not expand: edit the value"
        )
    if is_path:
        return (
            "a shell variable set neither in the script nor here, and a config expands none:"
            " edit the path"
        )
    names = ", ".join(sorted({f"${m.group(1) or m.group(3)}" for m in _REFERENCE.finditer(value)}))
    return (
        f"{names or 'a shell variable'}: not taken from this environment, where only path keys"
        " take a variable's value (a config is shared, and its values reach the trackers):"
        " write the value here"
    )


def _typed(tree: dict[str, Any], built: dict[str, Any]) -> dict[str, Any]:
    """The keys of `tree` with the values the config loader made of them."""
    return {
        key: (
            _typed(value, built[key])
            if isinstance(value, dict) and isinstance(built[key], dict) and key != "overrides"
            else built[key]
        )
        for key, value in tree.items()
    }


def _leaves(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    pairs = []
    for key, value in tree.items():
        pairs += (
            _leaves(value, f"{prefix}{key}.")
            if isinstance(value, dict)
            else [(f"{prefix}{key}", value)]
        )
    return pairs


def _drop_nulls(tree: dict[str, Any], prefix: str = "") -> list[str]:
    """Remove null leaves (verl's "not set") and sections left empty; the dotted keys removed."""
    removed = []
    for key in list(tree):
        if isinstance(tree[key], dict) and tree[key]:
            removed += _drop_nulls(tree[key], f"{prefix}{key}.")
            if not tree[key]:
                del tree[key]
        elif tree[key] is None:
            removed.append(f"{prefix}{key}")
            del tree[key]
    return removed


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
