"""Which built-in reward rules scored a GRPO step, recorded in its manifest and said on resume.

A run resumed across a change of the built-in rules (`trainer.rewards.rule_history`) rewards
the same responses otherwise from the resumed step on, with the same config: the settings
line has nothing to name, and the run went on with other rewards and advantages without a
word. Each step saved with the built-in rules records their version (`info.reward_rules`);
a resume of a step that records none (saved before it was recorded) or another version,
whose rows include some that a change since scores otherwise, says so in one warning line
and goes on. With `reward.path` the user's function scores every row: nothing is recorded
or said.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from mfsdp_ckpt.check.printable import cut_to, printable
from mfsdp_ckpt.format.layout import CheckpointPaths
from trainer.resume import manifest_of
from trainer.rewards.rule_history import CHANGES, CURRENT, RuleChange, changes_since
from trainer.runner import TrainingRun

INFO_KEY = "reward_rules"  # manifest info: the built-in rules' version that scored the step
_RECORDED_SINCE = "2026-12-06"  # the first mfsdp that records it


def manifest_info(custom: bool) -> dict[str, str]:
    """What a step's manifest records of the rules that scored it: the built-in rules'
    version, nothing where a `reward.path` function (`custom`) scored it."""
    return {} if custom else {INFO_KEY: CURRENT}


def rules_change_warning(
    found: CheckpointPaths, step: int, custom: bool, data_sources: Iterable[Any]
) -> str | None:
    """One line when the built-in rules that score this run are not those that scored the
    step `found` (at `step`), and a change between them scores some of `data_sources`
    otherwise; None with `custom` rewards, a step recording the current version (no change
    since it), or data no such change scores."""
    if custom:
        return None
    manifest = manifest_of(found)
    recorded = manifest.info.get(INFO_KEY) if manifest is not None else None
    sources = set(data_sources)
    met = [(change, _first(change, sources)) for change in changes_since(recorded)]
    met = [(change, source) for change, source in met if source is not None]
    if not met:
        return None
    where = found.manifest or found.root
    if recorded is None:
        then = (
            f"step {step} records no version of the built-in reward rules that scored it"
            f" (info.{INFO_KEY}: saved by an mfsdp before {_RECORDED_SINCE})"
        )
    else:
        known = isinstance(recorded, str) and recorded in {c.version for c in CHANGES}
        unknown = "" if known else ", a version this mfsdp does not know"
        then = (
            f"step {step} was scored by the built-in reward rules"
            f" {cut_to(repr(recorded), 40)}{unknown}"
        )
    changed = "; ".join(
        f"{change.what} (this run's data holds such rows: data_source {cut_to(repr(source), 40)})"
        for change, source in met
    )
    return (
        f"warning: {where}: {then}, this run scores with those of {CURRENT}: {changed}; the"
        f" steps after {step} may reward the same responses otherwise than the steps before did"
        " (docs/upgrading.md: how to keep the earlier rule)"
    )


def _first(change: RuleChange, sources: set[Any]) -> str | None:
    """One of `sources` whose rows `change` scores otherwise (the least, so the line is the
    same at every resume), None where there is none."""
    scored = sorted(str(source) for source in sources if change.scores(source))
    return scored[0] if scored else None


def warn_of_rule_changes(run: TrainingRun, custom: bool, data_sources: Iterable[Any]) -> None:
    """Say `rules_change_warning` of the step `run` resumed on stderr (main rank), where the
    run trains steps after it."""
    if not run.env.is_main or run.resume is None or run.start >= run.stop:
        return
    line = rules_change_warning(run.resume, run.start, custom, data_sources)
    if line is not None:
        print(printable(f"[{run.name}] {line}"), file=sys.stderr)
