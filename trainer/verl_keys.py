"""verl's config key names, read as mfsdp's: the config loader's lookup and adoption of them.

A verl user's overrides (`actor_rollout_ref.actor.optim.lr=1e-6`, `trainer.save_freq=10`,
SFT's `data.train_batch_size=256`) work as they are: each becomes its mfsdp key, with one
logged line that names the canonical key. Keys whose value means something not done here
(`rollout.multi_turn.enable=true`, tensor parallel sizes above 1) fail with one line saying
why, instead of being ignored; settings mfsdp has no switch for pass at the values that leave
them off (`param_offload=False`, trainer.verl_off_keys), settings that change nothing here at
any value (the critic's section in GRPO, `use_torch_compile`: trainer.verl_inert_keys) pass,
each with a note, and a null or `???` (verl's "not set") passes where a rule would read the
value. Keys verl copies from another (MIRRORS) are read as that key, and refused at another
value. docs/verl.md lists every key; `mfsdp config from-verl` prints a verl command line as
YAML.

The table of what each verl key means is trainer.verl_rules, verl's optimizer keys on its
Megatron backend trainer.verl_megatron_optim. This module finds a key's rule, reads a
run's keys against the table (with the rules that read another key of the run: MIRRORS,
clip_ratio, Megatron LoRA on or off, resume) and splits a config tree into mfsdp's keys
and verl's.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import types
import typing
from typing import Any

from mfsdp_ckpt.errors import MfsdpError
from mfsdp_ckpt.format import checkpoint_resolution, layout
from trainer import verl_interpolation, verl_truncation
from trainer.shown_value import typed_text
from trainer.verl_hydra_files import selected_group, selects_megatron
from trainer.verl_inert_keys import section_of
from trainer.verl_megatron_optim import (
    BETAS,
    OPTIMIZER_OVERRIDES,
    betas_on_megatron,
    megatron_adam_unset,
    on_megatron,
    optimizer_overrides_on_megatron,
    verls_betas,
)
from trainer.verl_model_len import MAX_MODEL_LEN, short_model_len
from trainer.verl_null_flags import null_switch
from trainer.verl_off_keys import MEGATRON_LORA_SECTIONS, same
from trainer.verl_rules import (
    ACTOR,
    CLIP_RATIO,
    CLIP_SIDES,
    DECAY_SCOPE,
    ESTIMATOR,
    FSDP_LORA_DEFAULTS,
    FSDP_LORA_ON_MEGATRON,
    LORA_OFF,
    MIN_LR_RATIO,
    MIRRORS,
    NO_LIMIT,
    NOT_SET,
    PARALLEL_RULE,
    PARALLEL_SIZES,
    RESUME,
    RULES,
    SUPERSEDED_BY,
    VERL_CLIP_DEFAULT,
    VERL_ONLY_SECTION,
    WEIGHT_DECAY,
    WORKER_IMPL,
    ZERO_CLIP_WHY,
    NotCarried,
    Rule,
    Unsupported,
    clips_to_zero,
    decays,
    grpo_final_validation,
    min_lr_of,
    normalise,
    note,
    trainer_of,
    verl_only_value,
    worker_version_refusal,
)
from trainer.verl_shared_keys import SHARED_WITH_VERL

log = logging.getLogger("mfsdp.config")


def rule_for(key: str) -> Rule | None:
    """The rule of verl key `key`: its own, else its section's (verl_inert_keys.SECTIONS)."""
    if key in RULES:
        return RULES[key]
    inert = section_of(key)
    return None if inert is None else Rule(None, why=inert.why, commands=inert.commands)


def key_rule(key: str) -> Rule | None:
    """The rule `carry_over` reads verl key `key` by: `rule_for`'s, else, for a model
    parallel size no rule names (`ulysses_sequence_parallel_size`), PARALLEL_RULE. Asked of
    `rule_for` alone, which command a key of verl's SFT trainer is for found no rule for
    the top-level ulysses_sequence_parallel_size: given to grpo it was carried over with a
    note, where `use_remove_padding` beside it was refused as SFT's."""
    rule = rule_for(key)
    if rule is None and key.rsplit(".", 1)[-1] in PARALLEL_SIZES:
        return PARALLEL_RULE
    return rule


def ignored_at_any_value(command: str, key: str) -> bool:
    """Whether verl's `key` (as a script writes it, `+` and all) is ignored by
    `mfsdp train <command>` whatever its value (Ray's settings): a value known only when
    the script runs changes nothing here, so it is not one to check. A key read beside
    another (a mirror, the clip ratio, whose rule has no why of its own) is not."""
    read_as = normalise(key.lstrip("+"))
    rule = rule_for(read_as)
    return (
        rule is not None
        and rule.target is None
        and rule.convert is None
        and bool(rule.why)
        and read_as not in MIRRORS
        and command in rule.commands
        and trainer_of(key.lstrip("+")) in (None, command)
    )


@functools.cache
def names(command: str) -> dict[str, str | None]:
    """The verl keys `mfsdp train <command>` takes, each with the mfsdp key it sets (None:
    none, or several): a typo of one is told the verl key meant, as a typo of an mfsdp key
    is (the README tells verl users their keys work as they are)."""
    found = {key: rule.target for key, rule in RULES.items() if command in rule.commands}
    if command == "grpo":  # the actor's optimizer section is `optim` here (`normalise`)
        found |= {ACTOR + key: target for key, target in found.items() if key.startswith("optim.")}
    ours = {key: target for key, target in found.items() if trainer_of(key) in (None, command)}
    return ours | dict.fromkeys(RESUME, "checkpoint.resume")


def shown_name(key: str, target: str | None) -> str:
    """A verl key as a suggestion: `trainer.save_freq (checkpoint.save_every here)`."""
    return f"{key} ({target} here)" if target else f"{key} (verl's)"


def is_unset(value: Any) -> bool:
    """verl's "not set": null, or OmegaConf's `???` (a value the run must give)."""
    return value is None or value == "???"


def groups(pairs: list[tuple[str, Any]]) -> list[list[tuple[str, Any]]]:
    """`pairs` in the groups `adopt_pairs` reads together, each alone else: resume_mode with
    resume_from_path, a key of MIRRORS with the key it copies, clip_ratio with the sides it
    may fill in."""
    keys = [normalise(key.lstrip("+")) for key, _value in pairs]
    present = set(keys)  # looked up per key: a list here made many keys quadratic
    clip_keys = {CLIP_RATIO, *(name for names in CLIP_SIDES.values() for name in names)}
    found: dict[str, list[tuple[str, Any]]] = {}
    for key, pair in zip(keys, pairs):
        leader = "resume" if key in RESUME else MIRRORS.get(key, key)
        leader = CLIP_RATIO if key in clip_keys and CLIP_RATIO in present else leader
        leader = leader if leader == "resume" or leader in present else key
        found.setdefault(leader, []).append(pair)
    return list(found.values())


def command_of(cls: type) -> str:
    """`grpo` for GRPO's config class (it has a rollout section), else `sft`."""
    return "grpo" if "rollout" in {f.name for f in dataclasses.fields(cls)} else "sft"


def adopt_tree(
    cls: type, tree: dict[str, Any], source: str, later: list[tuple[str, Any]] | None = None
) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """`tree` (a loaded YAML file) with its verl keys rewritten as mfsdp keys, and the file's
    keys as the rules read them, mfsdp's own among them (for `adopt_pairs` to read the
    command line's with: its `actor.loss_agg_mode` decides whether verl's worker key
    carries over, whichever of the two sets it). Keys that are
    neither are left in place, for the loader's unknown-key error to name. The verl keys are
    read as verl's loader reads them, with the file's `${a.b}` and `${oc.select:...}`
    references filled in (`verl_interpolation`); mfsdp's own keys as written. `later`: the
    run's command-line overrides, which win over the file's keys: a rule that reads another
    key of the run (Megatron or not, LoRA on or off) reads the run's, wherever it is given.
    Megatron's Adam settings for a run that sets no betas are `adopt_pairs`'s to write, once
    the whole run is known."""
    from trainer.config import ConfigError, set_dotted
    from trainer.config_yaml import MAX_EXPANDED_CHARS

    if isinstance(tree.get("defaults"), list):  # verl's own config files start with one
        raise ConfigError(
            f"{source}: `defaults:` is Hydra's list of the files verl merges into this one, and"
            f" a config here is one plain file: convert it with `mfsdp config from-verl {source}"
            " > config.yaml`, then give --config config.yaml"
        )
    native, _ = split_foreign(cls, tree)
    own = _pairs_of(native)  # the file's mfsdp keys, which the rules read as the run's too
    filled = copy.deepcopy(tree)
    try:
        verl_interpolation.resolve(filled, MAX_EXPANDED_CHARS)
    except verl_interpolation.InterpolationTooLarge as err:
        raise ConfigError(f"{source}: {err}") from None
    _, foreign = split_foreign(cls, filled)
    foreign.sort(key=lambda pair: pair[0] != ESTIMATOR)  # what the file trains, said first
    given = keys_given(_trained([*own, *foreign, *(later or [])]))
    try:
        adopted = _carried(cls, foreign, source, given, beside=own)
    except ConfigError as err:  # the first of its verl keys that fails: say where the rest are
        more = _failing(cls, foreign, given) - 1
        if more < 1:
            raise
        lister = (
            "with this command line's keys beside them (`mfsdp config from-verl` reads the"
            " file alone)"
            if later
            else f"`mfsdp config from-verl {source}` lists them all"
        )
        raise ConfigError(
            f"{err}; {more} more key(s) of the file do not carry over either: {lister}"
        ) from None
    for key, value in adopted:
        set_dotted(native, key, value)
    # a file that sets verl's pad_mode (sft_trainer's), unless the command line sets the
    # truncation: that value wins over the file's and any written here, so a note was untrue
    if command_of(cls) == "sft" and "data.truncation" not in keys_given(later or []):
        for note in verl_truncation.no_padding_truncation(native, given, None):
            log.warning("note: %s", note)
    return native, [*own, *foreign]


def _failing(cls: type, pairs: list[tuple[str, Any]], given: dict[str, Any]) -> int:
    """How many of `pairs` fail to carry over, each group of `groups` tried alone (in the
    run's keys, `given`, read once: read per group, a file of many keys took minutes)."""
    return sum(refusal(cls, group, given, own=True) is not None for group in groups(pairs))


def refusal(
    cls: type, pairs: list[tuple[str, Any]], given: dict[str, Any], own: bool = False
) -> str | None:
    """Why `pairs` (a group of `groups`) do not carry over in the run whose keys are `given`
    (`keys_given`; None: they do), tried without their notes: a value tried is not one the
    run gives. `own`: as `carry_over`'s."""
    log.disabled, disabled = True, log.disabled
    try:
        carry_over(cls, pairs, given, own=own)
    except NotCarried as err:
        return err.reason
    finally:
        log.disabled = disabled
    return None


def adopt_pairs(
    cls: type,
    pairs: list[tuple[str, Any]],
    source: str,
    earlier: list[tuple[str, Any]] | None = None,
) -> list[tuple[str, Any]]:
    """Dotted `(key, value)` pairs (command-line overrides, in order) with verl's keys
    rewritten, and Megatron's Adam settings where the run is on verl's Megatron backend and
    sets no betas anywhere (`megatron_adam_unset`); mfsdp's own keys and unknown keys pass
    through unchanged. `earlier`: the run's keys from its file (`adopt_tree`), which the
    rules read with `pairs`: read with the command line's alone, a Megatron key given there
    replaced the betas the file set, kept where the file held both. A verl key that does not
    carry over fails naming `source`."""
    run = _trained([*(earlier or []), *pairs])
    return _carried(cls, pairs, source, keys_given(run)) + megatron_adam_unset(cls, run)


def _trained(pairs: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The keys of an `mfsdp train` run that say how verl would train it: `pairs` less
    Hydra's selections of verl's Megatron files (`optim=megatron`), which select files only
    `mfsdp config from-verl` reads; the loader refuses them as given. Read as the Megatron
    backend, one wrote Megatron's betas into the run, with a note, before that refusal (and
    `optim=megatron` was refused as a key never typed, `optim.betas`)."""
    return [(key, value) for key, value in pairs if not selects_megatron(key, value)]


def _carried(
    cls: type,
    pairs: list[tuple[str, Any]],
    source: str,
    given: dict[str, Any],
    beside: list[tuple[str, Any]] | None = None,
) -> list[tuple[str, Any]]:
    """`carry_over` of `pairs` in the run whose keys are `given`, a key that does not carry
    over failing in one line naming `source`."""
    from trainer.config import ConfigError

    try:
        return carry_over(cls, pairs, given, own=True, beside=beside)
    except NotCarried as err:
        raise ConfigError(f"{source}: {err.text}") from None


def carry_over(
    cls: type,
    pairs: list[tuple[str, Any]],
    given: dict[str, Any] | None = None,
    own: bool = False,
    beside: list[tuple[str, Any]] | None = None,
) -> list[tuple[str, Any]]:
    """`adopt_pairs` without a source: NotCarried for the first verl key that does not carry
    over. `given` is `keys_given` of every pair of the run where `pairs` is a part of them
    (`groups`), for the rules that read another key (LoRA's rank); the caller reads it once
    for all its groups, as reading it per group made a file of many keys take minutes.
    `own`: the pairs are `mfsdp train`'s file and command line, where a key of mfsdp's name
    is mfsdp's own (`trainer.logger=[console,file]` gets the loader's message of the values
    it takes); else they are a verl config's, where that key is verl's too. `beside`: the
    mfsdp keys of the same source (a file's), which no verl key of it may give another value."""
    command = command_of(cls)
    spellings = [*pairs, *(beside or [])]
    given = keys_given(pairs) if given is None else given
    out: list[tuple[str, Any]] = []
    resume: dict[str, Any] = {}
    for raw, value in pairs:
        raw_key = raw.lstrip("+")  # Hydra's `+key=` (add) and `++key=` (force)
        key = normalise(raw_key)
        if _other_trainers(cls, raw_key):
            raise _for_other(command, raw_key)
        if key in MIRRORS and MIRRORS[key] in given:
            _check_mirror(raw_key, value, MIRRORS[key], given[MIRRORS[key]])
            continue
        key = MIRRORS.get(key, key)
        if _superseded(raw_key, key, given):
            continue
        # a key of mfsdp's name in mfsdp's own file or command line is mfsdp's; any other verl's
        verls = not (own and key == raw_key and is_native(cls, key))
        if verls and clips_to_zero(key, value) and not on_megatron(given):
            raise _no_equivalent(raw_key, value, ZERO_CLIP_WHY)
        if key == BETAS and verls_betas(raw_key, given) and on_megatron(given):
            out += betas_on_megatron(raw_key, value, given)
            continue
        if is_native(cls, key):
            # a null on a switch of verl's name is verl's false, whoever's file or line it is in
            shared = verls or key in SHARED_WITH_VERL[command]
            switch = null_switch(cls, raw_key, key) if shared and value is None else None
            if switch is not None:
                out += switch.items()
                continue
            if verls:
                _refuse_verl_only_value(raw_key, key, value)
                _note_first_rows(raw_key, key, value, given)
            value = _native_value(raw_key, key, value)
            if verls and key == WEIGHT_DECAY and decays(value) and not on_megatron(given):
                log.warning(
                    "note: verl's %s is %s=%s, %s",
                    raw_key,
                    key,
                    _given(raw_key, value),
                    DECAY_SCOPE,
                )
            elif key != raw_key:
                _refuse_two_spellings(raw_key, {key: value}, spellings)
                note(raw_key, {key: value}, "")
            out.append((key, value))
            continue
        leaf = key.rsplit(".", 1)[-1]
        if leaf == "_target_":  # the class verl builds the section as (its YAML files): no setting
            continue
        if key in RESUME:
            resume[leaf] = value
            continue
        raw_key, key, value = _as_whole(raw_key, key, value)
        if key == OPTIMIZER_OVERRIDES and on_megatron(given):
            out += optimizer_overrides_on_megatron(raw_key, value, given)
            continue
        if _lora_off(key, given):
            note(raw_key, {}, LORA_OFF)
            continue
        if key in FSDP_LORA_DEFAULTS and on_megatron(given):
            _fsdp_lora_on_megatron(raw_key, key, value)
            continue
        rule = key_rule(key)
        # the key as written: `actor_rollout_ref.actor.optim.x` is `optim.x` only once mapped
        if rule is None and _in_verl_section(cls, raw_key):
            if is_unset(value):  # a setting verl leaves at its default: nothing to carry
                note(raw_key, {}, NOT_SET)
                continue
            raise NotCarried(_unmapped_message(cls, raw_key))
        if rule is None:
            out.append((key, value))  # not a verl key we know: the loader names the closest keys
            continue
        if command not in rule.commands:
            raise _for_other(command, raw_key)
        _refuse_verl_only_value(raw_key, key, value)
        if key == CLIP_RATIO:
            out += _clip_ratio(raw_key, value, given)
            continue
        if key == MIN_LR_RATIO:
            out += _min_lr_ratio(raw_key, value, given)
            continue
        if key == WORKER_IMPL:
            _refuse_worker_by_version(raw_key, value, given)
        short = short_model_len(cls, value, given) if key == MAX_MODEL_LEN else None
        if short is not None:
            raise _no_equivalent(raw_key, value, short)
        target = rule.target if rule.convert is None else None
        switch = null_switch(cls, raw_key, target) if value is None else None
        if switch is not None:  # a null verl tests for truth: false, never "not set"
            out += switch.items()
            continue
        if is_unset(value) and (rule.convert is not None or rule.target is not None):
            note(raw_key, {}, NOT_SET)  # (`warmup_style: null`, verl's own default): the
            continue  # default stands, as for a key not given
        try:
            mapped = rule.apply(cls, value)
            mapped |= grpo_final_validation(key, value) if command == "grpo" else {}
        except Unsupported as err:
            raise _no_equivalent(raw_key, value, str(err)) from None
        _refuse_two_spellings(raw_key, mapped, spellings)
        note(raw_key, mapped, rule.why)
        out += mapped.items()
    if resume:
        out += _resume(resume, command)
    return out


def _other_trainers(cls: type, key: str) -> bool:
    """Whether verl key `key` (as written) is the other command's by its section, one only
    the other verl trainer's config has (`trainer_of`) and `cls` lacks, though a rule may
    read it as a key of `cls` (the actor's `optim.lr` is `optim.lr`): `actor_rollout_ref.*`
    in sft, a key of verl's SFT `engine` a rule maps in grpo. A section of mfsdp's own name
    (`model`, `optim`) is this command's, its verl names read by their rules. A Hydra
    selection (`engine=megatron`) selects no key: the loader says what it is."""
    command = command_of(cls)
    if trainer_of(key) in (None, command) or is_native(cls, key) or selected_group(key):
        return False
    if is_native(cls, key.split(".", 1)[0]):
        return False  # a section of mfsdp's own here: its rules and the loader answer
    rule = key_rule(normalise(key))
    if rule is not None:
        return ("grpo" if command == "sft" else "sft") in rule.commands
    # no rule: main_ppo's sections are read whole by `mfsdp train grpo`, which names what
    # it does not know there; a key of verl's SFT `engine` no rule names is known to
    # neither command (sent to `train sft`, it was refused there as unknown)
    return command == "sft"


def _for_other(command: str, key: str) -> NotCarried:
    """The refusal of verl key `key`, the other command's, given to `mfsdp train <command>`."""
    other = "grpo" if command == "sft" else "sft"
    return NotCarried(f"verl key '{key}' is for mfsdp train {other}, not {command}")


def _superseded(raw_key: str, key: str, given: dict[str, Any]) -> bool:
    """Whether `key` is one verl overwrites with its deprecated name's value, given not null
    in the run (SUPERSEDED_BY): not read, with a note, wherever the two stand."""
    deprecated = SUPERSEDED_BY.get(key)
    if deprecated is None or is_unset(given.get(deprecated)):
        return False
    note(
        raw_key,
        {},
        f"verl sets it to {deprecated}={_given(deprecated, given[deprecated])}, its deprecated"
        " name, which the run gives too",
    )
    return True


def keys_given(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The run's keys as the rules read them (Hydra's `+` dropped, the actor's optimizer as
    `optim.`), each with its value."""
    return {normalise(key.lstrip("+")): value for key, value in pairs}


def _megatron_lora_section(key: str) -> str | None:
    """The section of verl's Megatron LoRA settings (MEGATRON_LORA_SECTIONS) `key` is in."""
    return next((section for section in MEGATRON_LORA_SECTIONS if key.startswith(section)), None)


def megatron_lora_on(section: str, given: dict[str, Any]) -> bool:
    """Whether the run (`given`: its keys as `carry_over` reads them) turns verl's Megatron
    LoRA on in `section`: its rank given and above 0 (or a value read only at run time);
    verl's default rank 0 builds no adapter and reads no other `lora.*` key
    (verl/workers/config/megatron_peft.py)."""
    rank = given.get(section + "rank")
    off = isinstance(rank, int) and not isinstance(rank, bool) and rank <= 0
    return not (is_unset(rank) or off)


def _lora_off(key: str, given: dict[str, Any]) -> bool:
    """Whether `key` is a setting of verl's Megatron LoRA while it is off: each is ignored
    then at any value, as a bare `lora.merge=false` or `lora.type: lora` is in verl."""
    section = _megatron_lora_section(key)
    if section is None or key == section + "rank":
        return False
    return not megatron_lora_on(section, given)


def _fsdp_lora_on_megatron(raw_key: str, key: str, value: Any) -> None:
    """verl's FSDP-style LoRA key (`model.lora_rank`) on its Megatron backend, which never
    reads it: ignored at verl's default, which builds no adapter in either backend; refused
    at another, as verl trains no adapter of it and mfsdp would."""
    if is_unset(value) or same(value, FSDP_LORA_DEFAULTS[key]):
        note(raw_key, {}, FSDP_LORA_ON_MEGATRON)
        return
    why = FSDP_LORA_ON_MEGATRON
    raise _no_equivalent(raw_key, value, why)


def _given(key: str, value: Any) -> str:
    """`value` of `key` in a refusal or note: as the command line typed it, where it is an
    override's value (`shown_value.typed_text`: `true` and `True` alike, `1e-5` not
    `1e-05`), else as Python writes it."""
    typed = typed_text(key, value)
    return str(value) if typed is None else typed


def _no_equivalent(raw_key: str, value: Any, why: str) -> NotCarried:
    """The refusal of verl key `raw_key=value`, which does not carry over for `why`."""
    return NotCarried(
        f"verl key '{raw_key}={_given(raw_key, value)}' has no equivalent here: {why}", why
    )


def _as_whole(raw_key: str, key: str, value: Any) -> tuple[str, str, Any]:
    """A key inside a verl key that takes a mapping (`data.apply_chat_template_kwargs.
    enable_thinking=false`) as that key set to the mapping, so its rule judges it as the
    mapping written whole; it was an unknown key whose hint named the key itself."""
    if key in RULES:
        return raw_key, key, value
    parts = key.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        whole = ".".join(parts[:cut])
        if whole in RULES:
            for part in reversed(parts[cut:]):
                value = {part: value}
            rest = len(key) - len(whole)
            return raw_key[: len(raw_key) - rest], whole, value
    return raw_key, key, value


def _clip_ratio(raw_key: str, value: Any, given: dict[str, Any]) -> list[tuple[str, Any]]:
    """verl's clip_ratio, read as verl's policy loss reads it: a side takes it only where that
    side's clip_ratio_low / clip_ratio_high is null (`clip_ratio_low if not None else
    clip_ratio`), and verl's actor.yaml sets both to 0.2, so given alone it changes nothing
    in verl, nor here. `given` is every key of the run, so the order they come in does not
    matter (last-given once wrote both sides)."""
    if is_unset(value):
        note(raw_key, {}, NOT_SET)
        return []
    mapped: dict[str, Any] = {}
    kept: list[str] = []
    for side, (verl_key, key) in CLIP_SIDES.items():
        if key not in given and verl_key in given and is_unset(given[verl_key]):
            mapped[key] = value
            continue
        named = key if key in given else verl_key
        side_value = given.get(named)
        shown = (
            f"{VERL_CLIP_DEFAULT} (its default)"
            if side_value is None
            else _given(named, side_value)
        )
        kept.append(f"clip_ratio_{side}={shown}")
    if mapped:
        note(raw_key, mapped, "")
    if kept:
        log.warning(
            "note: verl's %s=%s is not read%s: verl reads it only where"
            " clip_ratio_low or clip_ratio_high is null, and trains with %s, as mfsdp does"
            " (actor.clip_ratio_low, actor.clip_ratio_high); set those to change the clip range",
            raw_key,
            _given(raw_key, value),
            f" for {kept[0].split('=')[0]}" if mapped else "",
            " and ".join(kept),
        )
    return list(mapped.items())


def _min_lr_ratio(raw_key: str, value: Any, given: dict[str, Any]) -> list[tuple[str, Any]]:
    """verl's optim.min_lr_ratio read as verl's backend reads it (MIN_LR_RATIO): on its
    FSDP backend the floor of the cosine schedule, min_lr_ratio x lr, which is optim.min_lr
    here where the run gives its lr; its Megatron backend never reads it. Only 0 was taken,
    and a script giving both keys was told to compute the product itself."""
    if is_unset(value):
        note(raw_key, {}, NOT_SET)
        return []
    if on_megatron(given):
        note(raw_key, {}, "verl's Megatron backend reads optim.min_lr, not this")
        return []
    if same(value, 0):  # 0.0 too
        note(raw_key, {}, "0 is mfsdp's default optim.min_lr")
        return []
    lr = given.get("optim.lr")
    min_lr = min_lr_of(value, lr)
    if min_lr is None:
        why = "optim.min_lr here is absolute: set optim.min_lr to min_lr_ratio x lr"
        raise _no_equivalent(raw_key, value, why)
    log.warning(
        "note: verl's %s=%s is optim.min_lr=%s here: min_lr_ratio x optim.lr (%s), the floor"
        " verl's cosine schedule falls to",
        raw_key,
        _given(raw_key, value),
        min_lr,
        _given("optim.lr", lr),
    )
    return [("optim.min_lr", min_lr)]


def _refuse_worker_by_version(raw_key: str, value: Any, given: dict[str, Any]) -> None:
    """NotCarried for verl's worker key where what it trained depends on the verl version
    (`worker_version_refusal`): read with the run's loss_agg_mode, verl's name or mfsdp's."""
    mode = given.get(ACTOR + "loss_agg_mode", given.get("actor.loss_agg_mode"))
    why = worker_version_refusal(value, mode)
    if why is not None:
        raise _no_equivalent(raw_key, value, why)


def _refuse_verl_only_value(raw_key: str, key: str, value: Any) -> None:
    """A value verl takes that the key it sets here does not (`trainer.logger=[file]`,
    `kl_loss_type=full`): refused by name, as the loader's enum error failed the whole
    conversion."""
    why = verl_only_value(key, value)
    if why is not None:
        raise _no_equivalent(raw_key, value, why)


def _refuse_two_spellings(
    raw_key: str, mapped: dict[str, Any], pairs: list[tuple[str, Any]]
) -> None:
    """NotCarried for a verl key whose mfsdp key is also among `pairs` (of one file, or of
    the command line) at another value: the later of the two won, silently, while the note
    named the verl key's value. At the same value they are one setting given twice."""
    for key, value in mapped.items():
        for other, given in pairs:
            other = other.lstrip("+")
            if other != raw_key and normalise(other) == key and not same(value, given):
                why = "one setting here, given two values (give one)"
                both = f"{raw_key}={_given(raw_key, value)} and {other}={_given(other, given)}"
                raise NotCarried(f"{both}: {why}", why)


def _check_mirror(raw_key: str, value: Any, copied: str, original: Any) -> None:
    """A verl key that copies `copied` by default, given beside it: ignored at the same
    value, refused at another (mfsdp has one setting for both)."""
    if not same(value, original):
        why = (
            f"it differs from {copied}={_given(copied, original)}, which verl copies into it"
            " by default, and they are one setting here (give them one value)"
        )
        raise _no_equivalent(raw_key, value, why)
    note(raw_key, {}, f"verl copies {copied} into it")


def _native_value(raw_key: str, key: str, value: Any) -> Any:
    """The value of an mfsdp key of verl's name as mfsdp reads it: verl's -1 ("no limit")
    is null; an advantage estimator other than GRPO's is refused in one line."""
    if key == ESTIMATOR and value != "grpo":
        default = " (verl's default, gae, is PPO with a critic)" if value == "gae" else ""
        why = f"mfsdp trains GRPO only; set algorithm.adv_estimator=grpo{default}"
        raise NotCarried(f"{raw_key}={_given(raw_key, value)}: {why}", why)
    if key in NO_LIMIT and no_limit(value):
        note(raw_key, {key: None}, "")
        return None
    return value


def _note_first_rows(raw_key: str, key: str, value: Any, given: dict[str, Any]) -> None:
    """A note where verl's `data.val_max_samples` limits the validation rows: verl picks
    that many at random (seeded by data.seed) where data.shuffle is true, its default;
    mfsdp validates on the file's first rows. verl tests data.shuffle for truth, so a null
    there takes the first rows too, as false does (trainer.verl_null_flags)."""
    if key not in NO_LIMIT or no_limit(value) or not given.get("data.shuffle", True):
        return
    log.warning(
        "note: verl's %s=%s validates on the first %s rows here; verl picks that many at"
        " random (seeded by data.seed) where data.shuffle is true, its default",
        raw_key,
        _given(raw_key, value),
        _given(raw_key, value),
    )


def no_limit(value: Any) -> bool:
    """Whether `value` of a key of NO_LIMIT is verl's "every row": it limits the rows only
    above 0 (`max_samples > 0`), so -1, its default, and 0 alike."""
    return isinstance(value, int) and not isinstance(value, bool) and value <= 0


def target_of(cls: type, given: str) -> str | None:
    """The mfsdp key the key `given` (mfsdp's or verl's) sets in a config of `cls`, whatever
    its value: None where it sets none, or several."""
    key = _read_as(given)
    if is_native(cls, key):
        return key
    if key in RESUME:
        return "checkpoint.resume"
    rule = rule_for(key)
    return rule.target if rule is not None else None


def value_target(cls: type, given: str) -> str | None:
    """The mfsdp key of a config of `cls` that takes the value of the key `given` (mfsdp's
    or verl's) with no rule converting it, for the loader to read an override's text as
    that key's type (`trainer.default_local_dir=6` is a run dir named 6, as
    `trainer.run_dir=6` is): None where a rule converts the value, or it sets no key of
    this command."""
    key = _read_as(given)
    if _other_trainers(cls, given.lstrip("+")):
        return None
    if is_native(cls, key):
        return key
    if key == RESUME[1]:  # resume_from_path: the path, read with resume_mode (`_resume`)
        return "checkpoint.resume"
    rule = rule_for(key)
    if rule is None or rule.convert is not None or command_of(cls) not in rule.commands:
        return None
    return rule.target


def _read_as(given: str) -> str:
    """The key `given` as the rules read it: Hydra's `+` dropped, the actor's optimizer as
    `optim.`, a key verl copies from another (MIRRORS) as that one."""
    key = normalise(given.lstrip("+"))
    return MIRRORS.get(key, key)


def carries(cls: type, given: str) -> bool:
    """Whether `adopt_pairs` takes the key `given` into a config of `cls` (an mfsdp key, or a
    verl key a rule maps for this command), whatever its value."""
    key = _read_as(given)
    if _other_trainers(cls, given.lstrip("+")):
        return False
    if is_native(cls, key) or key in RESUME:
        return True
    rule = rule_for(key)
    return rule is not None and command_of(cls) in rule.commands


def _in_verl_section(cls: type, key: str) -> bool:
    """Whether `key`, which no rule maps, stands in a section of verl's that mfsdp has none
    of: one whose other keys the rules map for this command (`actor_rollout_ref`,
    `custom_reward_function`, `reward.custom_reward_function` inside mfsdp's `reward`); not
    in mfsdp's own sections, whose closest keys the loader names."""
    verl = names(command_of(cls))
    parts = key.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        section = ".".join(parts[:cut])
        if is_native(cls, section):
            return False
        if any(name.startswith(section + ".") for name in verl):
            return True
    return False


def _unmapped_message(cls: type, key: str) -> str:
    """For a key in a section of verl's (`_in_verl_section`) that no rule maps: the whole
    key as written, and mfsdp's key of the same name where there is one (`rollout.dtype`
    for `actor_rollout_ref.rollout.dtype`), else the verl keys of its top-level section it
    may be a typo of. The loader named only the section ("unknown config key
    'actor_rollout_ref'", "... 'custom_reward_function'", whose other keys carry over) and
    guessed a key from its name."""
    from trainer.config_suggestions import close_keys

    top, _, tail = key.partition(".")
    verl = names(command_of(cls))
    close = close_keys(key, [], [name for name in verl if name.startswith(top + ".")])
    if top + "." == VERL_ONLY_SECTION and is_native(cls, tail):
        hint = f"did you mean {tail}?"
    elif close:
        hint = f"did you mean {', '.join(shown_name(name, verl[name]) for name in close)}?"
    else:
        hint = f"`mfsdp config defaults {command_of(cls)}` lists mfsdp's keys"
    return f"verl key '{key}' is not one mfsdp maps (docs/verl.md); {hint}"


def split_foreign(
    cls: type, tree: dict[str, Any], prefix: str = ""
) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """The part of `tree` that names `cls`'s fields, and the rest as dotted pairs."""
    hints = field_types(cls)
    native: dict[str, Any] = {}
    foreign: list[tuple[str, Any]] = []
    for key, value in tree.items():
        kind = hints.get(key) if isinstance(key, str) else None
        if kind is None:
            foreign += _flatten(f"{prefix}{key}", value)
        elif dataclasses.is_dataclass(kind) and isinstance(value, dict):
            native[key], more = split_foreign(typing.cast(type, kind), value, f"{prefix}{key}.")
            foreign += more
        elif _read_as_verl(f"{prefix}{key}", value):
            foreign.append((f"{prefix}{key}", value))
        else:
            native[key] = value
    return native, foreign


def _read_as_verl(key: str, value: Any) -> bool:
    """Whether the mfsdp key `key` is read with verl's keys (`adopt_pairs`): at a value of
    verl's meaning (`_native_value`), as one a verl key copies (MIRRORS), to be checked
    against it, at a value verl takes that it does not (`verl_only_value`), or as
    `optim.betas`, which verl's Megatron backend never reads (SFT's `optim` section is
    mfsdp's too), or at a gradient clip or weight decay verl's FSDP backend trains
    otherwise (`clips_to_zero`, DECAY_SCOPE)."""
    verl_value = (key == ESTIMATOR and value != "grpo") or (key in NO_LIMIT and no_limit(value))
    verl_value = verl_value or verl_only_value(key, value) is not None
    verl_value = verl_value or clips_to_zero(key, value) or (key == WEIGHT_DECAY and decays(value))
    return verl_value or key in MIRRORS.values() or key == BETAS


def _pairs_of(tree: dict[str, Any]) -> list[tuple[str, Any]]:
    """A loaded YAML tree's keys as dotted pairs."""
    return [pair for key, value in tree.items() for pair in _flatten(key, value)]


def _flatten(key: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, dict) and value and key not in RULES:
        return [pair for sub, item in value.items() for pair in _flatten(f"{key}.{sub}", item)]
    return [(key, value)]


@functools.cache
def field_types(cls: type) -> types.MappingProxyType[str, Any]:
    """The field types of the config section `cls`, read once per class: every key of a
    config is looked up here, and `typing.get_type_hints` evaluates each annotation anew
    (about a millisecond a class), which made a file of thousands of keys take minutes."""
    return types.MappingProxyType(typing.get_type_hints(cls))


def is_native(cls: type, key: str) -> bool:
    """Whether dotted `key` names a field of `cls` (a mapping field absorbs the rest of the key)."""
    kind: Any = cls
    for part in key.split("."):
        if not dataclasses.is_dataclass(kind):
            return typing.get_origin(kind) is dict
        hints = field_types(typing.cast(type, kind))
        if part not in hints:
            return False
        kind = hints[part]
    return True


def takes_whole(cls: type, key: str, value: Any) -> bool:
    """Whether the mfsdp key `key` of `cls` (`is_native`) takes `value`, a mapping or a
    list, as its value: a section or a mapping field takes a mapping, a list field a list.
    `optim.lr={}` does not (verl fails building its config class on it); read as a section
    left empty, or as a section of nulls, it was dropped and mfsdp's default kept."""
    kind: Any = cls
    for part in key.split("."):
        if not dataclasses.is_dataclass(kind):
            return True  # inside a mapping field, which takes any value
        kind = field_types(typing.cast(type, kind))[part]
    return _takes(kind, dict if isinstance(value, dict) else list)


def _takes(kind: Any, container: type) -> bool:
    """Whether a field of type `kind` takes a value of `container` (dict or list)."""
    origin = typing.get_origin(kind)
    if origin is typing.Annotated:
        return _takes(typing.get_args(kind)[0], container)
    if origin in (typing.Union, types.UnionType):
        return any(_takes(arg, container) for arg in typing.get_args(kind))
    if kind is Any:
        return True
    if container is dict:
        return dataclasses.is_dataclass(kind) or dict in (kind, origin)
    return bool({kind, origin} & {list, tuple})


_RESUME_KEYS = "trainer.resume_mode/resume_from_path"
# by command: when verl's trainer reads resume_from_path, and the model it starts from else
_RESUME_READERS = {
    "sft": (
        "verl's SFT trainers read it only with trainer.resume_mode auto or resume_path",
        "model.path",
    ),
    "grpo": (
        "verl's main_ppo reads it only with trainer.resume_mode=resume_path",
        "actor_rollout_ref.model.path",
    ),
}


def _resume(resume: dict[str, Any], command: str) -> list[tuple[str, str]]:
    """verl's resume_mode (auto | disable | resume_path) and resume_from_path -> the mfsdp
    key and value: checkpoint.resume, or for a path `_resume_path`. verl's SFT trainers
    (their checkpoint handler) resume a path given under auto too; main_ppo
    (ray_trainer's `_load_checkpoint`) reads the path only under resume_path, and under auto
    resumes its run dir's own newest step or starts from actor_rollout_ref.model.path: a
    GRPO conversion that took the path started from other weights than verl's run did."""
    mode, path = resume.get("resume_mode", "auto"), resume.get("resume_from_path")
    if mode == "resume_path" or (mode == "auto" and path and command == "sft"):
        if not path:
            raise NotCarried("trainer.resume_mode=resume_path needs trainer.resume_from_path")
        return [_resume_path(str(path), command)]
    if mode not in ("auto", "disable"):
        raise NotCarried(f"trainer.resume_mode must be auto, disable or resume_path, got {mode!r}")
    if not path:
        note(_RESUME_KEYS, {"checkpoint.resume": mode}, "")
        return [("checkpoint.resume", mode)]
    default = "resume_mode" not in resume
    reader, model = _RESUME_READERS[command]
    starts = f"starts from {model}"
    if mode == "auto":
        starts = (
            f"resumes the run dir's own newest step, else {starts}, as checkpoint.resume=auto does"
        )
    note(
        f"{RESUME[1]}={path}",
        {},
        f"{reader}; under {mode}{' (its default)' if default else ''} it {starts}",
    )
    if default:
        return []
    note(RESUME[0], {"checkpoint.resume": mode}, "")
    return [("checkpoint.resume", mode)]


# what a verl step given as the run's start replaces, by command: the SFT trainers' model,
# main_ppo's actor model, which is its KL reference's too
_REPLACED = {
    "sft": "verl's model.path or model.partial_pretrain",
    "grpo": "verl's actor_rollout_ref.model.path, and the KL reference with it",
}


def _resume_path(path: str, command: str) -> tuple[str, str]:
    """verl's resume_from_path, a step verl saved: mfsdp resumes only a step of its own runs
    (`checkpoint.resume` refuses another trainer's, having no optimizer, data or step state
    of mfsdp's in it), and starts from any checkpoint's weights (`model.path`). A path here
    that holds another trainer's checkpoint is `model.path`; one that holds an mfsdp step,
    or is not on this machine (a script converted away from its cluster), stays
    `checkpoint.resume`. The note says what each starts, and what a verl step needs (the
    conversion said `checkpoint.resume=PATH` alone, and the run refused it once started)."""
    kind = _checkpoint_layout(path)
    if kind is not None and kind != layout.MFSDP:
        log.warning(
            "note: verl's %s is model.path=%s here (in place of %s): a %s checkpoint,"
            " whose optimizer, dataloader and step mfsdp does not resume, so the run starts"
            " from its weights at step 0; give a trainer.run_dir other than verl's run dir",
            _RESUME_KEYS,
            path,
            _REPLACED[command],
            kind,
        )
        return "model.path", path
    if kind is not None:  # an mfsdp step
        note(_RESUME_KEYS, {"checkpoint.resume": path}, "")
        return "checkpoint.resume", path
    log.warning(
        "note: verl's %s is checkpoint.resume=%s here, which resumes a step of an mfsdp run"
        " only (no checkpoint is at that path on this machine); a verl checkpoint there is"
        " refused: give model.path=%s instead (the run starts from its weights at step 0) and"
        " a trainer.run_dir other than verl's run dir",
        _RESUME_KEYS,
        path,
        path,
    )
    return "checkpoint.resume", path


def _checkpoint_layout(path: str) -> str | None:
    """The layout of the checkpoint at `path` (`layout.MFSDP`, verl's, Megatron-LM's, ...);
    None where none can be read there. A checkpoint neither key reads (verl's FSDP backend,
    Megatron's torch_dist) is not carried over, in the line `mfsdp ckpt inspect` says for it
    (what it is, and the verl.model_merger command that converts it): taken for "no
    checkpoint there", the conversion advised model.path, which refuses it too."""
    try:
        return checkpoint_resolution.resolve_checkpoint(path).kind
    except layout.ForeignFormatError as err:
        raise NotCarried(f"{err}; then give model.path=OUT") from None
    except (MfsdpError, OSError):
        return None
