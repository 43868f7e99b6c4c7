"""A verl run (its launch script or its YAML config) as an mfsdp config, for `mfsdp config
from-verl`: what carries over, under which mfsdp key, and what does not and why.

The key table is `trainer.verl_keys`; this module only finds the `key=value` pairs (in a
shell script: the arguments of `python3 -m verl.trainer.main_ppo` or of verl's SFT trainer,
its lines read as bash reads them (`trainer.shell_lines`, `trainer.shell_quoting`), the
script's variables expanded where the command stands (`trainer.shell_variables`), bash
arrays `NAME=( ... )` spread where `"${NAME[@]}"` stands) and reports.
Nothing in the script is executed.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mfsdp_ckpt.check.printable import printable
from mfsdp_ckpt.errors import MfsdpFailedError, MfsdpUsageError
from mfsdp_ckpt.storage import safe_files
from mfsdp_ckpt.storage.byte_store import CheckpointFileError
from trainer import (
    shell_arithmetic,
    shell_lines,
    shell_quoting,
    shell_variables,
    verl_defaults,
    verl_hydra_files,
    verl_interpolation,
    verl_keys,
)
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
# `$(...)` and backquotes hold a command whose words shlex splits apart
# (`experiment_name=run_$(date +%s)` became `run_$(date`): kept whole as text, never run
_COMMAND_SUBSTITUTION = re.compile(r"\$\([^()]*\)|`[^`]*`")
_NESTING = 4  # passes over nested substitutions; a deeper one is held whole (`_hold_deeper`)
_HELD = "\ue000"  # a private-use character marks a held substitution while shlex splits
_SHOWN_KEYS = 4  # keys a note names before "and N more"
# the script's own arguments passed on to verl: more overrides, known only when it runs
_FORWARDED = ("$@", "$*", "${@}", "${*}")
# the compound commands whose header runs where the command stands (`_opens_only_its_header`)
_HEADERS = frozenset({"for", "select", "while", "until", "if"})
# the keys of verl's trainer configs that are mfsdp keys of the same name too, per command: a
# YAML of these only is a verl override file. main_ppo's are those at the top level of its
# _generated_ppo_trainer.yaml; its model, rollout and optim keys stand under
# actor_rollout_ref, so a top-level `model.path`, `rollout.n` or `optim.lr` (keys of verl's
# generation and SFT configs) makes a GRPO file mfsdp's: counted as shared, an mfsdp GRPO
# config converted at exit 0 with verl's defaults written over it
_SHARED_DATA_AND_NAMES = frozenset(
    {
        *("data.train_files", "data.val_files", "data.prompt_key", "data.shuffle"),
        *("trainer.project_name", "trainer.experiment_name", "trainer.logger", "trainer.device"),
    }
)
_SHARED_WITH_VERL = {
    # fsdp_sft_trainer's sft_trainer.yaml, sft_trainer's sft_trainer_engine.yaml
    "sft": _SHARED_DATA_AND_NAMES
    | {
        *("data.max_length", "data.messages_key", "data.micro_batch_size", "data.truncation"),
        *("data.prompt_dict_keys", "data.response_key", "data.response_dict_keys"),
        *("model.path", "model.lora_rank", "model.lora_alpha", "model.target_modules"),
        *("optim.lr", "optim.betas", "optim.clip_grad", "optim.weight_decay", "trainer.seed"),
    },
    # main_ppo's _generated_ppo_trainer.yaml: its data, algorithm and trainer sections
    "grpo": _SHARED_DATA_AND_NAMES
    | {
        *("algorithm.adv_estimator", "algorithm.norm_adv_by_std_in_grpo"),
        *("data.filter_overlong_prompts", "data.max_prompt_length", "data.train_batch_size"),
        *("data.val_max_samples", "trainer.val_before_train"),
    },
}


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
    incomplete: list[str] = []  # config files of the user's, merged in by Hydra
    to_check: list[str] = []  # keys whose variables the script sets in blocks
    module = None  # verl's trainer module; a YAML does not name it
    refused: list[str] = []  # the script's config-group selections not carried over
    if source.suffix.lower() in (".yaml", ".yml"):
        tree, defaults = _yaml_tree(text, source)
        if not defaults:  # a Hydra `defaults:` list is verl's
            _refuse_mfsdp_config(tree, source)
        command = command or likely_kind(tree)  # as `mfsdp train` tells them apart
        script_notes, incomplete = _defaults_notes(defaults, command)
        script_notes += _interpolation_notes(tree, source)
        tree, pairs = verl_keys.split_foreign(_config_class(command), tree)
    else:
        pairs, module, script_notes, incomplete, refused, to_check = _script_pairs(text, source)
        command = command or ("grpo" if module in GRPO_MODULES else "sft")
    # a config file of the user's that verl merges in may set any key: verl's defaults are
    # written only where the whole run is in the source
    conversion = _convert(tree, pairs, command, str(source), module, not incomplete)
    conversion.notes += script_notes
    conversion.dropped += refused
    conversion.incomplete = list(dict.fromkeys(incomplete + to_check + conversion.incomplete))
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


def _refuse_mfsdp_config(tree: dict[str, Any], source: Path) -> None:
    """Refuse a YAML that is an mfsdp config: every key in it is one an mfsdp trainer takes
    as it is, and one at least is not verl's too (`strategy`, `checkpoint`,
    `trainer.run_dir`, ...), or it sets nothing. Converted, it was taken as a verl run that
    sets almost nothing: verl's defaults were written over mfsdp's (trainer.seed 0 became 1)
    at exit 0. A file of keys verl and mfsdp share only (`data.train_files`,
    `algorithm.adv_estimator`, ...) is a verl override file, and converts: refused, it went
    to `mfsdp train` with mfsdp's defaults (rollout.n 5, the KL loss on) for the keys it
    leaves to verl's. A file with verl keys and mfsdp keys both converts, its mfsdp keys kept
    as written."""
    keys = [key for key, _value in _leaves(tree)]
    if not keys:
        raise VerlSourceError(f"{source}: sets nothing; not a verl config")
    own: dict[str, str] = {}  # command: a key of its that verl has not
    for command in ("sft", "grpo"):
        cls = _config_class(command)
        if all(verl_keys.is_native(cls, key) for key in keys):
            own_keys = [key for key in keys if key not in _SHARED_WITH_VERL[command]]
            if own_keys:
                own[command] = own_keys[0]
    if own:
        raise VerlSourceError(
            f"{source}: an mfsdp config (every key in it is mfsdp's, and"
            f" {next(iter(own.values()))} is not verl's), not one to convert: give it to"
            f" `mfsdp train {'|'.join(own)} --config {source}`"
        )


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
    shown = ", ".join(filled[:_SHOWN_KEYS]) + (
        f" and {len(filled) - _SHOWN_KEYS} more" if len(filled) > _SHOWN_KEYS else ""
    )
    return [
        f"{shown}: ${{...}} references to other keys of this file filled in, as verl's"
        " OmegaConf does"
    ]


def _script_pairs(
    text: str, source: Path
) -> tuple[list[tuple[str, Any]], str, list[str], list[str], list[str], list[str]]:
    """The `key=value` arguments of the script's (last) verl trainer command, its module,
    notes on what of the command is known only when the script runs, the config file of
    the user's it names (`_hydra_config_notes`), its config-group selections that are
    not carried over (`_group_selections`), and the keys whose variables it sets in a
    block that may not run (`_flag_maybe`)."""
    try:
        launch, launches, variables = _read_script(text, source)
    except shell_variables.ExpansionTooLarge as err:
        raise VerlSourceError(f"{source}: {err}") from None
    if launch.refused:
        raise VerlSourceError(launch.refused)
    notes: list[str] = []
    if launches > 1:
        notes.append(
            f"the script starts verl {launches} times; this config is its last command's:"
            " convert the others from a script of their own"
        )
    hydra_notes, incomplete = _hydra_config_notes(launch.words, launch.command)
    pairs = []
    # the values make one config: one budget for them all, as large as the script's
    # variables may make them (each value's aliases count as often as they are used)
    budget = ExpansionBudget(max_chars=MAX_EXPANDED_CHARS)
    for key, text_value in launch.texts:
        if _COMMAND_SUBSTITUTION.search(text_value):  # the shell's output, text here
            parsed: Any = text_value
        else:
            parsed = _parse(text_value, f"{source}: {key}", budget) if text_value.strip() else None
        pairs.append((key, parsed))
    taken_notes = [
        f"${name}: taken from this environment, as the shell running the script here would"
        for name in launch.taken
    ]  # named, never quoted: the config is a file people share
    pairs, selection_notes, refused = _group_selections(pairs, launch)
    notes = [*variables.notes, *launch.notes, *taken_notes, *notes, *hydra_notes]
    return pairs, launch.module, notes + selection_notes, incomplete, refused, launch.incomplete


@dataclass
class _Launch:
    """A verl trainer command of the script, its values expanded as they stand there (a
    variable set again after the command does not reach it)."""

    command: str  # sft | grpo
    module: str  # verl's trainer module (GRPO_MODULES, SFT_MODULES)
    words: list[str]  # its arguments as written
    texts: list[tuple[str, str]] = field(default_factory=list)  # key, value expanded
    notes: list[str] = field(default_factory=list)
    taken: list[str] = field(default_factory=list)  # environment variables put into paths
    refused: str = ""  # why one of its values cannot be read (`_unreadable`)
    incomplete: list[str] = field(default_factory=list)  # keys to check (`_flag_maybe`)


@dataclass
class _Script:
    """What reading a script's commands in order has found so far (`_read_command`)."""

    variables: shell_variables.Variables
    launch: _Launch | None = None  # its last verl trainer command
    launches: int = 0
    array: shell_variables.Array | None = None  # a bash array being read, over lines
    array_guarded: bool = False  # that array is set in a block that may not run: not set here
    blocks: shell_lines.Blocks = field(default_factory=shell_lines.Blocks)


def _read_script(text: str, source: Path) -> tuple[_Launch, int, shell_variables.Variables]:
    """The script's last verl trainer command, how many it starts, and its variables."""
    script = _Script(shell_variables.Variables(MAX_EXPANDED_CHARS))
    bodies: list[str] = []  # here-doc bodies: text for other programs, not commands
    for number, line in shell_lines.logical_lines(text, bodies):
        if len(line) > MAX_LINE_CHARS:
            raise VerlSourceError(
                f"{source}: a line of {len(line)} characters (continuations joined) starting "
                f"{line[:40]!r}, more than the {MAX_LINE_CHARS} a launch command needs"
            )
        try:
            words = _shell_words(line)
        except ValueError:
            if any(module in line for module in GRPO_MODULES + SFT_MODULES):
                raise VerlSourceError(_unparsed_launch_message(source, number)) from None
            continue  # an unbalanced quote: bash stops there, and runs no verl command in it
        for command in shell_quoting.commands(words):  # `A=1; B=2`: two commands
            _read_command(script, command, number, source)
    if script.launch is None:
        raise VerlSourceError(_no_launch_message(source, bodies))
    return script.launch, script.launches, script.variables


def _read_command(script: _Script, words: list[str], number: int, source: Path) -> None:
    """Take one command of the script (on line `number`): the blocks it opens and closes,
    each a scope of the variables (`shell_lines.Reading.scopes`: what a subshell sets is
    seen inside it only), the variables it sets, the array it goes on, or the verl trainer
    command it is."""
    if script.array is not None:  # the next words of a bash array
        _read_words(script, words, number, source, inside=False, guarded=False)
        return
    variables = script.variables
    inside = script.blocks.inside()  # a block that may not run open before it
    reading = script.blocks.read(words)
    opened_first = reading.opened_first()
    for _ in range(opened_first):
        variables.enter()
    variables.note_sets(reading.words, number)
    variables.read_opaque(reading.words, number)
    _read_words(script, reading.words, number, source, inside, reading.guarded)
    for scope in reading.scopes[opened_first:]:
        if scope is None:
            variables.enter()
        else:
            variables.leave(subshell=scope)


def _read_words(
    script: _Script, words: list[str], number: int, source: Path, inside: bool, guarded: bool
) -> None:
    """Take the words of one command: the variables they set (`guarded`: maybe, as in a
    block that may not run or after a guard; `inside`: a block that may not run was open
    before them), the array they go on, or the verl trainer command they are."""
    variables = script.variables
    if guarded:
        variables.read_guarded(words, number)
    if script.array is None and words and (start := shell_variables.ARRAY_START.match(words[0])):
        script.array = shell_variables.Array(start.group(1), start.group(2) == "+")
        script.array_guarded = guarded
        words = [start.group(3), *words[1:]] if start.group(3) else words[1:]
    if script.array is not None:
        if script.array.read(words):
            if not script.array_guarded:
                array = script.array
                variables.assign_array(array.name, array.items, array.append)
            script.array = None
        return
    if not guarded and variables.read_line(_past_group_openers(words)):
        return
    sets_surely = not inside and (not guarded or _opens_only_its_header(words))
    for simple in shell_quoting.simple_commands(words):
        for name, how in shell_variables.unknowable_targets(simple):
            if sets_surely:
                variables.set_unknowable(name, how, number)
            else:  # `read MODEL` in an uncalled function erased the MODEL set before it
                variables.set_maybe(name, number)
        _read_launch(script, simple, source)


def _opens_only_its_header(words: list[str]) -> bool:
    """Whether the command `words` is a loop's or condition's header and nothing else that
    may not run: a `for`/`select` loop sets its name, and a `while`/`until`/`if` condition
    (`while read -r line`) runs, where the command stands, whether the body runs or not."""
    return words[0] in _HEADERS and not any(
        word in shell_quoting.OPERATORS or word.startswith("(") for word in words[1:]
    )


def _past_group_openers(words: list[str]) -> list[str]:
    """`words` less the `{` opening groups at their start: in `{ MODEL=/m/g; }`, which
    always runs, `MODEL=/m/g` is a line that only sets a variable."""
    start = 0
    while start < len(words) and words[start] == "{":
        start += 1
    return words[start:]


def _read_launch(script: _Script, words: list[str], source: Path) -> None:
    """Take the command `words` (one of a list or pipeline: `shell_quoting.simple_commands`)
    as the script's last verl trainer command if it starts one."""
    for module in GRPO_MODULES + SFT_MODULES:
        if module in words:
            script.launches += 1
            command = "grpo" if module in GRPO_MODULES else "sft"
            script.launch = _expand_launch(
                _Launch(command, module, words[words.index(module) + 1 :]), script.variables, source
            )


def _expand_launch(launch: _Launch, variables: shell_variables.Variables, source: Path) -> _Launch:
    """`launch` with its `key=value` words expanded by the script's variables as they are
    now; every value is expanded before any is parsed, so a substitution bomb is refused
    before YAML reads megabytes. Notes made while expanding go to the launch's notes."""
    before = len(variables.notes)
    cls = _config_class(launch.command)
    for word, written in _spread(launch.words, variables, launch.notes):
        if word in _FORWARDED:
            launch.notes.append(
                f"{word}: the script passes its own arguments on to verl; the overrides it is "
                "run with are not in this config: add them to it"
            )
            continue
        key, sep, value = word.partition("=")
        if sep and not key.startswith("-"):
            expanded = variables.substitute(value)
            launch.refused = launch.refused or _unreadable(source, key, value, expanded, variables)
            if _names_a_path(cls, key):
                expanded = variables.from_environment(expanded, launch.taken)
            launch.texts.append((key, shell_quoting.literal(expanded)))
            unknowable = variables.unknowable_notes(value)
            launch.notes += [note for note in unknowable if note not in launch.notes]
            _flag_maybe(launch, key, shell_quoting.literal(expanded), variables.origins(written))
            _flag_opaque(
                launch, key, shell_quoting.literal(expanded), variables.opaque_origins(written)
            )
    launch.notes[:0] = variables.notes[before:]
    del variables.notes[before:]
    return launch


def _spread(
    words: list[str], variables: shell_variables.Variables, notes: list[str]
) -> Iterator[tuple[str, str]]:
    """Each word of the command, arrays spread (`Variables.spread`), with the word as
    written (`"${DATA[@]}"` for each of the array's words): the variables it reads."""
    for written in words:
        for word in variables.spread([written], notes):
            yield word, written


def _flag_maybe(launch: _Launch, key: str, value: str, origins: list[tuple[str, int]]) -> None:
    """A key whose value comes from a variable set inside a block (an `if` or `case` branch,
    a loop, a function body, after `&&`/`||`) or a subshell or pipeline: whether bash runs
    the block is known only when the script runs (a function that is called is named too),
    and what a subshell sets is not seen after it, so the value the variable has outside is
    used and the key is to check; a variable with no value outside stays as written
    (`value` still names it), and is said to be left unresolved, not used."""
    if not origins:
        return
    lines: dict[str, list[str]] = {}
    for name, line in origins[: shell_variables.ORIGINS_KEPT]:
        lines.setdefault(name, []).append(str(line))
    shown = ", ".join(
        f"${name} (line{'s' * (len(numbers) > 1)} {', '.join(numbers)})"
        for name, numbers in lines.items()
    ) + (" and more" if len(origins) > shell_variables.ORIGINS_KEPT else "")
    left = {
        shell_variables.reference_name(match) for match in shell_variables.REFERENCE.finditer(value)
    }
    unresolved = [f"${name}" for name, _line in origins if name in left]
    outcome = (
        f"with no value outside it, {', '.join(dict.fromkeys(unresolved))} is left unresolved:"
        " set the value here"
        if unresolved
        else "the value set outside it is used here: check it"
    )
    launch.notes.append(
        f"{key}={value}: {shown} set inside a block (an if/case branch, a loop, a function, or"
        " after && or ||) that may not run, or in a subshell or pipeline, whose settings are"
        f" not seen after it; {outcome}"
    )
    launch.incomplete.append(f"{key}={value}")


def _flag_opaque(launch: _Launch, key: str, value: str, origins: list[tuple[str, str]]) -> None:
    """A key whose value uses a variable that a command running text not read here (`source
    FILE`, `. FILE`, `eval ...`) may set, as no assignment after that command sets it: the
    value bash gives is known only when the script runs, and the key is to check. A script
    that sources `~/.bashrc` before setting every variable its verl command uses converts
    as before."""
    if not origins:
        return
    names = ", ".join(f"${name}" for name, _command in origins)
    launch.notes.append(
        f"{key}={value}: {names} may be set by {origins[0][1]}, which runs text not read here,"
        f" and no assignment after it sets {'them' if len(origins) > 1 else 'it'}: check it"
    )
    launch.incomplete.append(f"{key}={value}")


def _unreadable(
    source: Path, key: str, written: str, expanded: str, variables: shell_variables.Variables
) -> str:
    """Why a value is refused, in one line naming the variable it came from or the key: it
    holds bash's `$'...'` quoting (`shell_quoting`; carried over as text, it became
    `$evil\\nmodel:` and YAML made a mapping of it) or a line break (quotes spanning lines,
    which verl's command line does not take either). "" for any other value."""
    if shell_quoting.ANSI_C in expanded:
        mark = shell_quoting.ANSI_C
        what = (
            "is written in bash's $'...' quoting, whose escapes (\\n, \\t, ...) are not read here"
        )
        fix = "write the value in plain quotes"
    elif "\n" in expanded:
        mark = "\n"
        what = "holds a line break (quoted text spanning lines)"
        fix = "write the value on one line"
    else:
        return ""
    names = [
        shell_variables.reference_name(match)
        for match in shell_variables.REFERENCE.finditer(written)
        if mark in variables.values.get(shell_variables.reference_name(match), "")
    ]
    holder = f"${names[0]} (in its value)" if names else "its value"
    return f"{source}: {key}: {holder} {what}: {fix}"


def _unparsed_launch_message(source: Path, line: int) -> str:
    """A verl command this cannot split into words (a quote that never closes): said, as
    skipping it converted another command of the script, or none, without a word."""
    return (
        f"{source}: line {line}: a verl command whose quotes do not close (bash stops there"
        " with a syntax error): fix the quoting to convert it"
    )


def _no_launch_message(source: Path, bodies: list[str]) -> str:
    """No verl trainer command among the script's commands: one inside a here-doc (a job
    script fed to `sbatch <<EOF`) is text another program reads, and said so."""
    if any(module in body for body in bodies for module in GRPO_MODULES + SFT_MODULES):
        return (
            f"{source}: the verl command is inside a here-doc (<<WORD ... WORD: text another"
            " program reads, such as a job script fed to sbatch): put that command in a"
            " script of its own to convert it"
        )
    return (
        f"{source}: no `python3 -m verl.trainer.main_ppo ...` or verl SFT trainer "
        "command found (or give a verl YAML config)"
    )


# Hydra's options that name the YAML a verl command starts from (`--config-path=DIR`,
# `--config-name NAME`): its keys are not on the command line
_HYDRA_CONFIG_OPTIONS = ("--config-path", "--config-name", "-cp", "-cn")


def _hydra_config_notes(words: list[str], command: str) -> tuple[list[str], list[str]]:
    """A note on the YAML the command loads with Hydra's --config-path / --config-name and,
    for a file of the user's, those options again: its settings are not in this conversion
    (they were left out without a word, then named at exit 0). verl's own configs hold
    verl's defaults (`verl_hydra_files`), which need nothing carried."""
    given = _hydra_options(words)
    if not given:
        return [], []
    path, name = _config_path_and_name(given)
    shown = ", ".join(f"{option} {value}".strip() for option, value in given.items())
    if verl_hydra_files.is_verl_config(path, name):
        return [f"{shown}: {_verl_defaults_words(command)}"], []
    return [
        f"{shown}: verl loads its settings from that YAML first; they are not in"
        " this config: convert it with `mfsdp config from-verl FILE.yaml` and merge the two"
    ], [shown]


def _hydra_options(words: list[str]) -> dict[str, str]:
    """The command's Hydra --config-path / --config-name options (and short forms), given
    as `--option=value` or `--option value`."""
    given: dict[str, str] = {}
    for index, word in enumerate(words):
        option, sep, value = word.partition("=")
        if option in _HYDRA_CONFIG_OPTIONS:
            given[option] = value if sep else (words[index + 1] if index + 1 < len(words) else "")
    return given


def _config_path_and_name(given: dict[str, str]) -> tuple[str | None, str | None]:
    return given.get("--config-path", given.get("-cp")), given.get(
        "--config-name", given.get("-cn")
    )


def _group_selections(
    pairs: list[tuple[str, Any]], launch: _Launch
) -> tuple[list[tuple[str, Any]], list[str], list[str]]:
    """`pairs` less the Hydra config-group selections (`optim=fsdp`), a note naming those
    that select the file verl's trainer config already selects (they change nothing), and
    "key=option: why" for each other selection: a run under another file's defaults (a
    megatron optimizer, a critic) is not the run this conversion describes."""
    config = verl_hydra_files.loaded_config(
        launch.module, *_config_path_and_name(_hydra_options(launch.words))
    )
    kept, same, refused = [], [], []
    for key, option in pairs:
        if verl_hydra_files.selected_group(key) is None:
            kept.append((key, option))
            continue
        why = verl_hydra_files.unlike_verl_selection(key, option, config)
        shown = f"{key}={_shown(option)}"
        if why is None:
            same.append(shown)
        else:
            refused.append(f"{shown}: {why}")
    notes = [f"{', '.join(same)}: the file verl's {config} config selects anyway"] if same else []
    return kept, notes, refused


def _shell_words(line: str) -> list[str]:
    """shlex's words of `line`, each command substitution in it one piece of text."""
    line = shell_quoting.mark(line)
    if _HELD in line:
        return shlex.split(line)
    held: list[str] = []

    def hold_text(text: str) -> str:
        held.append(text)
        return f"{_HELD}{len(held) - 1}{_HELD}"

    def hold(match: re.Match) -> str:
        return hold_text(match.group(0))

    line = shell_arithmetic.ARITHMETIC.sub(hold, line)  # `$((1024 * 2))` is one word too
    for _ in range(_NESTING):  # innermost first; each pass reads the whole line
        line = _COMMAND_SUBSTITUTION.sub(hold, line)
    line = _hold_deeper(line, hold_text)
    marker = re.compile(f"{_HELD}([0-9]+){_HELD}")

    def restore(text: str) -> str:
        while marker.search(text):  # a held piece holds only pieces held before it
            text = marker.sub(lambda m: held[int(m.group(1))], text)
        return text

    return [restore(word) for word in shlex.split(line)]


def _hold_deeper(line: str, hold: Callable[[str], str]) -> str:
    """`line` with each `$(` the passes of `_shell_words` left (nested deeper than
    `_NESTING`, or never closed) held whole, to its matching `)` or the end of the line:
    split as shlex splits it, the words inside became settings of their own
    (`run_$(echo a.b=999 ...)` set a.b)."""
    out: list[str] = []
    index = 0
    while (start := line.find("$(", index)) >= 0:
        depth, end = 0, len(line)
        for position in range(start + 1, len(line)):
            depth += (line[position] == "(") - (line[position] == ")")
            if depth == 0:
                end = position + 1
                break
        out += [line[index:start], hold(line[start:end])]
        index = end
    return "".join(out) + line[index:]


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
    rule = verl_keys.rule_for(key)
    if key == "trainer.resume_from_path":  # read with resume_mode as checkpoint.resume
        key = "checkpoint.resume"
    elif rule is not None:
        key = rule.target or ""
    return key in _path_keys(cls)


def _convert(
    tree: dict[str, Any],
    pairs: list[tuple[str, Any]],
    command: str,
    source: str,
    module: str | None = None,
    whole: bool = True,
) -> Conversion:
    """`tree` (keys already mfsdp's) plus `pairs` carried over one by one, so one key that
    cannot be carried is reported without stopping the rest, plus, where the source is the
    `whole` run, verl's defaults for the keys it leaves out where mfsdp's differ
    (`_verl_defaults`); the result is checked whole."""
    from trainer.config import ConfigError, config_from_tree, config_to_dict, set_dotted

    cls = _config_class(command)
    conversion = Conversion(command, tree)
    collected = _Collect()
    log = logging.getLogger("mfsdp.config")
    log.addHandler(collected)
    propagate, log.propagate = log.propagate, False
    try:
        for group in verl_keys.groups(pairs):
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
    if whole:
        conversion.dropped += _unset_estimator(cls, conversion.tree, pairs)
        conversion.notes += _verl_defaults(cls, conversion.tree, pairs, module)
    conversion.notes += _steps_within_epochs(conversion.tree, module)
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


def _given_keys(cls: type, tree: dict[str, Any], pairs: list[tuple[str, Any]]) -> set[str | None]:
    """The mfsdp keys the source sets, in `tree` or by a verl key of `pairs` (carried over
    or not)."""
    return {verl_keys.target_of(cls, key) for key, _value in pairs} | {
        key for key, _value in _leaves(tree)
    }


def _unset_estimator(cls: type, tree: dict[str, Any], pairs: list[tuple[str, Any]]) -> list[str]:
    """A GRPO conversion of a run that sets no advantage estimator, as not carried over:
    verl's default (gae) trains PPO with a critic, which no mfsdp run is, so converting it
    to GRPO would train something else without a word (as `algorithm.adv_estimator=gae`
    given is refused)."""
    if verl_keys.command_of(cls) != "grpo" or verl_keys.ESTIMATOR in _given_keys(cls, tree, pairs):
        return []
    return [
        f"{verl_keys.ESTIMATOR}: not set, so verl trains its default, gae (PPO with a critic);"
        " mfsdp trains GRPO only: set algorithm.adv_estimator=grpo if that is the run"
    ]


def _verl_defaults(
    cls: type, tree: dict[str, Any], pairs: list[tuple[str, Any]], module: str | None
) -> list[str]:
    """Write into `tree` verl's default for each key of `verl_defaults` the source does not
    set (in `tree` or by a verl key of `pairs`, carried over or not), where mfsdp's own
    differs: the run trains as verl would. One note per key written."""
    from trainer.config import config_to_dict, set_dotted

    command = verl_keys.command_of(cls)
    chosen, either = verl_defaults.verl_defaults(command, module)
    given = _given_keys(cls, tree, pairs)
    own = dict(_leaves(config_to_dict(cls())))
    notes = []
    for default in chosen:
        if default.key in given or own[default.key] == default.value:
            continue
        set_dotted(tree, default.key, default.value)
        notes.append(
            f"{default.key}={_shown(default.value)}: verl's default ({default.verl_key}), which"
            f" the source does not set; mfsdp's own is {_shown(own[default.key])}"
        )
    unset = [key for key in either if key not in given]
    if unset:
        notes.append(
            f"{', '.join(unset)}: not set, and verl's defaults for them differ between its"
            " SFT trainers (fsdp_sft_trainer, sft_trainer), which this YAML does not name:"
            " mfsdp's stand (docs/verl.md lists both)"
        )
    return notes


# verl's legacy SFT trainer: its LR schedule spans its epochs, not total_training_steps
_EPOCH_SCHEDULED = "verl.trainer.fsdp_sft_trainer"


def _steps_within_epochs(tree: dict[str, Any], module: str | None) -> list[str]:
    """A run that sets trainer.total_steps (verl's trainer.total_training_steps) also ends
    after trainer.epochs epochs, when that comes first: verl's fit loops (ray_trainer's and
    both SFT trainers') run `for epoch in range(total_epochs)` and stop at
    total_training_steps only inside it, where mfsdp's `trainer.total_steps` alone goes round
    the data as often as it takes (a converted run trained more steps than verl's). One note,
    and one more for verl's legacy `fsdp_sft_trainer` (`module`), whose learning-rate
    warmup and decay span steps per epoch x total_epochs where mfsdp's span
    trainer.total_steps: every step's rate differed, and only docs/verl.md said so."""
    from trainer.config import set_dotted

    trainer = tree.get("trainer") or {}
    if trainer.get("total_steps") is None:
        return []
    set_dotted(tree, "trainer.steps_within_epochs", True)
    epochs = trainer.get("epochs", "1, mfsdp's default,")
    notes = [
        f"trainer.steps_within_epochs=true: as in verl, the run ends after trainer.epochs={epochs}"
        " epochs when that comes before trainer.total_steps"
    ]
    if module == _EPOCH_SCHEDULED:
        notes.append(
            f"trainer.total_steps={trainer['total_steps']}: the learning-rate schedule (warmup,"
            f" decay) differs from verl's: {module} spans it over steps per epoch x"
            " trainer.epochs and uses total_training_steps only to stop, mfsdp spans it over"
            " trainer.total_steps; for verl's schedule write trainer.stop_at_step in its place"
        )
    return notes


def _shown(value: Any) -> str:
    """A value as the config below writes it (`false`, not Python's `False`)."""
    return yaml.safe_dump(value, default_flow_style=True).removesuffix("\n...\n").strip()


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
            "a shell variable with no value here (not set by the script, or set only as it"
            " runs), and a config expands none: edit the path"
        )
    names = ", ".join(
        sorted(
            {
                f"${shell_variables.reference_name(m)}"
                for m in shell_variables.REFERENCE.finditer(value)
            }
        )
    )
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
