"""LoRA's target modules as PEFT receives them: names, never a regex.

PEFT matches a `target_modules` or `exclude_modules` string with `re.fullmatch` against
every module name of the model, in C, with no time limit: a pattern that backtracks
(`(.|.)*X`) held a run at its start for ever, where no signal can interrupt it. Such a
string, from `model.target_modules` or an adapter's adapter_config.json, is matched here
instead, by `re` as PEFT would, in a child process that is killed after REGEX_SECONDS and
may not take more than REGEX_MEMORY (the `regex` package's own time limit does not cover
compiling, which for `((a{1000}){1000}){1000}` never ends either). PEFT then gets the list
of the module names matched, which it compares as plain names. `all-linear` and lists of
names go to PEFT as given: it matches those by name suffix, with no pattern;
`layers_pattern`, which PEFT pastes into a regex of its own, must be a plain name.

What the targets then pick is checked before PEFT injects anything
(`refuse_untrainable_targets`): only the decoder's linear layers take an adapter here.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

import torch

from mfsdp_ckpt.check.printable import cut_to
from trainer.config import ConfigError

ALL_LINEAR = "all-linear"  # PEFT's own shorthand, no regex
# Matching a few thousand module names takes milliseconds; a regex still at it after this
# backtracks.
REGEX_SECONDS = 5.0
REGEX_MEMORY = 1 << 30  # address space of the matching process
_BAD_PATTERN = 3  # the matching process's exit code for a pattern `re` cannot compile
ACCEPTED = (
    "LoRA here adapts the decoder's torch.nn.Linear layers only, such as [q_proj, v_proj]"
    " or all-linear"
)

_MATCHER = f"""
import json, re, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({REGEX_MEMORY}, {REGEX_MEMORY}))
request = json.load(sys.stdin)
try:
    pattern = re.compile(request["pattern"])
except (re.error, RecursionError, OverflowError, ValueError) as err:
    print(" ".join(str(err).split())[:200] or type(err).__name__, file=sys.stderr)
    sys.exit({_BAD_PATTERN})
json.dump([name for name in request["names"] if pattern.fullmatch(name)], sys.stdout)
"""


def named_targets(targets: Any, module_names: Iterable[str], key: str) -> Any:
    """`targets` (target_modules) as PEFT may receive it: a regex becomes the names of the
    modules it matches (ConfigError naming `key` when it matches none); `all-linear` and
    lists of names stay as they are (`all-linear` in any case, as PEFT reads it)."""
    if not isinstance(targets, str) or _is_all_linear(targets):
        return targets
    names = list(module_names)
    matched = regex_matches(targets, names, key)
    if not matched:
        example = next((name for name in names if name.count(".") > 2), "")
        raise ConfigError(
            f"{key}: the regex {cut_to(repr(targets), 200)} matches no module of the model (module"
            " names"
            f" are full paths, such as {example!r}); or give names such as [q_proj, v_proj]"
        )
    return matched


def named_exclusions(exclude: Any, module_names: Iterable[str], key: str) -> Any:
    """exclude_modules as PEFT may receive it: a regex becomes the names it matches (none
    is fine: nothing is left out); a list of names stays as it is."""
    if not isinstance(exclude, str):
        return exclude
    return regex_matches(exclude, list(module_names), key)


def regex_matches(pattern: str, names: list[str], key: str) -> list[str]:
    """The `names` `pattern` matches whole (`re.fullmatch`, as PEFT matches), found in a
    child process bounded in time and memory; ConfigError naming `key` when the pattern is
    no regex or the matching does not finish within those bounds."""
    request = json.dumps({"pattern": pattern, "names": names})
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _MATCHER],
            input=request,
            capture_output=True,
            text=True,
            timeout=REGEX_SECONDS,
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"{key}: the regex {cut_to(repr(pattern), 200)} takes over {REGEX_SECONDS:g} s to"
            " match the"
            f" model's {len(names)} module names (it backtracks); name the modules instead,"
            " such as [q_proj, v_proj]"
        ) from None
    if done.returncode == _BAD_PATTERN:
        raise ConfigError(
            f"{key}: {cut_to(repr(pattern), 200)} is not a regex ({done.stderr.strip()})"
        )
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise ConfigError(
            f"{key}: matching the regex {cut_to(repr(pattern), 200)} against the module names"
            " failed"
            f" within {REGEX_MEMORY >> 20} MiB ({cut_to(said, 200)})"
        )
    return list(json.loads(done.stdout))


def refuse_untrainable_targets(config: Any, model: torch.nn.Module, key: str) -> None:
    """Refuse, naming `key`, a LoRA `config` that would adapt anything but the decoder's
    linear layers, before PEFT injects it. PEFT also adapts embeddings, convolutions,
    transformers' Conv1D and MultiheadAttention, whose adapters (`lora_embedding_A` on an
    embedding, a transposed weight under Conv1D's) nothing here trains, saves, merges or
    pushes as they are: an `embed_tokens` target beside
    `q_proj` was dropped without a word, alone it left nothing to train. It refuses other
    modules (a decoder layer, a norm) itself, in a message its module repr cuts into many
    lines. The output layer is linear, but the loss reads its weight directly. A name that
    matches no module would also be dropped without a word, and targets that match nothing
    at all (every one excluded) leave nothing to train."""
    modules = dict(model.named_modules())
    _refuse_unmatched_names(config.target_modules, list(modules), key)
    targeted = targeted_modules(config, model)
    if not targeted:
        raise ConfigError(
            f"{key}: no module is left to adapt once exclude_modules and layers_to_transform"
            " are applied; adapt the decoder's linear layers, such as [q_proj, v_proj]"
        )
    output_layer = _output_layer(model)
    refusals = [
        why
        for name in targeted
        if (why := _why_untrainable(name, modules[name], output_layer)) is not None
    ]
    if refusals:
        more = len(refusals) - 1  # each reason is a sentence: the count says what it counts
        others = f" ({more} more module{'s' if more > 1 else ''} it targets refused too)"
        raise ConfigError(f"{key}: {refusals[0]}{others if more else ''}; {ACCEPTED}")


def _why_untrainable(
    name: str, module: torch.nn.Module, output_layer: torch.nn.Module | None
) -> str | None:
    """Why `module` cannot take an adapter here, or None when it can."""
    if module is output_layer:
        return f"{name} cannot take a LoRA adapter here (the loss reads its weight directly)"
    if not _is_linear(module):
        return f"{_module_label(name)} ({type(module).__name__}) is not a linear layer"
    return None


def refuse_rank_past_weights(config: Any, model: torch.nn.Module, key: str) -> None:
    """ConfigError naming `key` (what sets the rank) when the rank exceeds both sizes of a
    weight it adapts: such an adapter is no low-rank one, and PEFT allocates its r x in and
    out x r matrices before anything else (`model.lora_rank=2**40` was "out of memory" for
    562 TB, with advice to lower the batch)."""
    modules = dict(model.named_modules())
    for name in targeted_modules(config, model):
        out_size, in_size = modules[name].weight.shape[:2]
        if config.r > max(out_size, in_size):
            raise ConfigError(
                f"{key}={config.r} exceeds the {out_size} x {in_size} weight of {name} it"
                f" adapts (a LoRA rank is at most {max(out_size, in_size)} there)"
            )


def targeted_modules(config: Any, model: torch.nn.Module) -> list[str]:
    """The names of the modules PEFT adapts for `config`, matched by PEFT's own rule
    (`check_target_module_exists`: exclusions, layers_to_transform); `all-linear` stands for
    what PEFT expands it to, every nn.Linear and Conv1D but the output layer. The model
    itself (name "") is among them where a name or regex names it, as PEFT would refuse it
    with a message about an empty string."""
    from peft.tuners.tuners_utils import check_target_module_exists
    from transformers.pytorch_utils import Conv1D

    matching = copy.copy(config)
    if _is_all_linear(config.target_modules):
        output_layer = _output_layer(model)
        matching.target_modules = {
            name
            for name, module in model.named_modules()
            if isinstance(module, (torch.nn.Linear, Conv1D)) and module is not output_layer
        }
    return [name for name, _ in model.named_modules() if check_target_module_exists(matching, name)]


def _refuse_unmatched_names(targets: Any, module_names: list[str], key: str) -> None:
    """PEFT matches a list of names by suffix and drops, without a word, a name that no
    module has (`q_porj` beside `q_proj`)."""
    if isinstance(targets, str):
        return
    for target in sorted(targets):
        if not any(name == target or name.endswith(f".{target}") for name in module_names):
            raise ConfigError(
                f"{key}: {cut_to(repr(target), 200)} names no module of the model (module names"
                " end in"
                " q_proj, v_proj, ...); give names the model has, or all-linear"
            )


def _is_all_linear(targets: Any) -> bool:
    return isinstance(targets, str) and targets.lower() == ALL_LINEAR


def _is_linear(module: torch.nn.Module) -> bool:
    """A plain linear layer (or a subclass): what the merged export, GRPO's weight push and
    the adapter's parameter names (`lora_A`, `lora_B`) are built for. Conv1D is linear too,
    but stores its weight transposed, which none of those expects."""
    return isinstance(module, torch.nn.Linear)


def _output_layer(model: torch.nn.Module) -> torch.nn.Module | None:
    get = getattr(model, "get_output_embeddings", None)
    return get() if callable(get) else None


def _module_label(name: str) -> str:
    """A module as a message names it: the root module's name is the empty string."""
    return name or "the model itself"
