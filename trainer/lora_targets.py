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
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

from trainer.config import ConfigError

ALL_LINEAR = "all-linear"  # PEFT's own shorthand, no regex
# Matching a few thousand module names takes milliseconds; a regex still at it after this
# backtracks.
REGEX_SECONDS = 5.0
REGEX_MEMORY = 1 << 30  # address space of the matching process
_BAD_PATTERN = 3  # the matching process's exit code for a pattern `re` cannot compile

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
    lists of names stay as they are."""
    if not isinstance(targets, str) or targets == ALL_LINEAR:
        return targets
    names = list(module_names)
    matched = regex_matches(targets, names, key)
    if not matched:
        example = next((name for name in names if name.count(".") > 2), "")
        raise ConfigError(
            f"{key}: the regex {targets!r:.200} matches no module of the model (module names"
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
            f"{key}: the regex {pattern!r:.200} takes over {REGEX_SECONDS:g} s to match the"
            f" model's {len(names)} module names (it backtracks); name the modules instead,"
            " such as [q_proj, v_proj]"
        ) from None
    if done.returncode == _BAD_PATTERN:
        raise ConfigError(f"{key}: {pattern!r:.200} is not a regex ({done.stderr.strip()})")
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise ConfigError(
            f"{key}: matching the regex {pattern!r:.200} against the module names failed"
            f" within {REGEX_MEMORY >> 20} MiB ({said[:200]})"
        )
    return list(json.loads(done.stdout))


def check_layers_pattern(value: Any, key: str) -> None:
    """layers_pattern is None, a name or a list of names (`layers`): PEFT pastes each into
    a regex, so anything but a plain name would be a pattern it matches unbounded."""
    names = [value] if isinstance(value, str) else value
    if value is None or (isinstance(names, list) and all(_plain_name(n) for n in names)):
        return
    raise ConfigError(
        f"{key}: {value!r:.120} is not a module name or a list of them (such as 'layers')"
    )


def _plain_name(name: Any) -> bool:
    return isinstance(name, str) and name.isidentifier()
