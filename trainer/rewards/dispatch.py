"""Score a batch of responses: each row's `data_source` picks the rule, or one custom function
scores everything.

A score function may return a number or a dict with a "score" key (verl's convention, which lets
it report extra values such as "acc"); `accuracy` is "acc" when given, else score > 0. A score is
cast with `float()` as verl casts it (a bool is 1.0 or 0.0, a numpy or 0-d torch number its
value); a string, None, NaN, infinity or a number past float32's range is refused, as is a
function that raises (or calls `sys.exit()`), or does not return within `reward.timeout_s`:
the run stops with one line naming the reward file, the function and the row
(`RewardFunctionError`). A custom function's prints go to stderr, not stdout.

Each function is given `extra_info` as verl's reward manager gives it (`reward_extra_info`),
and an `async def` function is awaited, as verl awaits one, within the same time limit. Each
call gets its own deep copy of the row's `ground_truth` and `extra_info`: the rows are kept
for the whole run, and a function that changed a list in them (a checker popping its test
cases) changed what every later step, and not a resumed run, gave it; verl builds its rows
anew each time it draws them. Copying costs once per response what the row holds there
(small for every dataset verl's recipes read; a dataset with megabytes of test cases per
row pays for copying them).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import multiprocessing
import numbers
import reprlib
import sys
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from math import isfinite
from typing import Any

from mfsdp_ckpt.check.printable import cut_to, error_line
from mfsdp_ckpt.errors import report_stranded
from trainer.rewards import gsm8k, math, math_dapo
from trainer.rewards.custom import (
    RewardError,
    RewardFunctionError,
    end_processes_started_since,
    load_reward_function,
    processes_alive,
    restore_command_stdout,
    threads_started_since,
    user_code_output,
)
from trainer.rewards.time_limit import STUCK_GRACE_S, RewardTimeout, time_limit

# The data sources with a built-in rule, as verl's `default_compute_score` routes them
# (verl/utils/reward_score/__init__.py as of verl-project/verl 1dda039b, 2026-08-22, unchanged
# since volcengine/verl b178a3cd): a source verl routes nowhere (`gsm8k` without `openai/`)
# has no rule here either.
GSM8K_SOURCES = ("openai/gsm8k",)
MATH_SOURCES = ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500")
DAPO_SOURCES = ("math_dapo", "math", "math_dapo_reasoning")
DAPO_PREFIX = "aime"  # aime2024, aime25, ...: every source that starts with it
BUILT_IN = ", ".join((*GSM8K_SOURCES, *MATH_SOURCES, *DAPO_SOURCES, f"{DAPO_PREFIX}*"))

# Sources verl scores with rules not built in here, and the rule's name in verl
VERL_ONLY = {
    **dict.fromkeys(
        ("numina_aops_forum", "numina_synthetic_math", "numina_amc_aime")
        + ("numina_synthetic_amc", "numina_cn_k12", "numina_olympiads"),
        "prime_math",
    ),
    **dict.fromkeys(("codecontests", "apps", "codeforces", "taco"), "sandbox_fusion/prime_code"),
    "hiyouga/geometry3k": "geo3k",
    **dict.fromkeys(
        ("searchR1_nq", "searchR1_triviaqa", "searchR1_popqa", "searchR1_hotpotqa")
        + ("searchR1_2wikimultihopqa", "searchR1_musique", "searchR1_bamboogle"),
        "search_r1_like_qa_em",
    ),
}

Rule = Callable[[str, str], float]

# The `num_turns` verl's reward manager adds to every row's extra_info
# (verl/workers/reward_manager/naive.py): its single-turn agent loop counts 2, the prompt and
# the response (the `rollout_reward_scores` it adds beside it are none for a single turn).
SINGLE_TURN_NUM_TURNS = 2


def built_in_rule(data_source: Any) -> Rule | None:
    """The rule that scores `data_source`'s rows, or None when none is built in."""
    if not isinstance(data_source, str):
        return None
    if data_source in GSM8K_SOURCES:
        return gsm8k.compute_score
    if data_source in MATH_SOURCES:
        return math.compute_score
    if data_source in DAPO_SOURCES or data_source.startswith(DAPO_PREFIX):
        return math_dapo.compute_score
    return None


def no_built_in_reward(data_source: Any) -> str:
    """Why a row of `data_source` cannot be scored without reward.path, on one line."""
    verl_rule = VERL_ONLY.get(data_source) if isinstance(data_source, str) else None
    verl = f" (verl's {verl_rule} rule, not built in here)" if verl_rule else ""
    return (
        f"no built-in reward for data_source {cut_to(repr(data_source), 80)}{verl} (built in:"
        f" {BUILT_IN}); "
        "set reward.path and reward.name to score it"
    )


def default_compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None
) -> float:
    """The built-in rule for a data source (verl's `default_compute_score` for these sources).

    The rules compare text, as verl's do; a ground truth that is a whole number (a JSON or
    parquet column of integers) is compared as its decimal text (`ground_truth_text`), and
    anything else that is no text is refused (`RewardError`), not scored 0 for a right answer
    (the data loader refuses such rows first)."""
    rule = built_in_rule(data_source)
    if rule is None:  # the data loader refuses such rows before the model loads
        raise RewardError(no_built_in_reward(data_source))
    text = ground_truth_text(ground_truth)
    if text is None:
        raise RewardError(f"ground_truth is {no_text_to_compare(ground_truth)}")
    return rule(solution_str, text)


# The largest whole number a float64 holds with every smaller one: past it a float column's
# value need not be the integer that was written (2**53 + 1 reads as 2**53)
_EXACT_FLOAT_INTEGERS = 2**53


def ground_truth_text(value: Any) -> str | None:
    """The text the built-in rules compare for a ground truth `value`, or None where it has
    none. Text is itself; an integer of any width is its decimal text (`72` as "72"), and so
    is a float that is exactly one within 2**53 (`72.0`: pandas stores an integer column with
    a null in it as float64). Any other number has no one text: a float32 column's 0.1 reads
    0.10000000149011612 and `5e-05` may have been written 0.00005, so a right answer would
    score 0; a bool, a Decimal or a list is no answer's text either."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):  # int, and numpy's integers of every width
        return str(int(value))
    # float and numpy's floats; not Fraction (Rational) or Decimal (no Real)
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Rational):
        number = float(value)
        if number.is_integer() and abs(number) <= _EXACT_FLOAT_INTEGERS:
            return str(int(number))
    return None


def no_text_to_compare(value: Any) -> str:
    """Why `value`, with no `ground_truth_text`, cannot be a ground truth of the built-in
    rules, on one line."""
    return (
        f"{type(value).__name__} {cut_to(repr(value), 60)}: the built-in rewards compare text, as"
        " verl's "
        'do, and take a number only when it is a whole one (72 as "72"); write it as text '
        '(`"0.5"`, as the answer is written), or set reward.path to a function that takes it'
    )


def reward_extra_info(extra_info: Any) -> Any:
    """A row's `extra_info` as verl's reward manager passes it to the score function: a
    missing or null one is `{}` (verl's RLHFDataset), and the dict gets `num_turns` and
    `rollout_reward_scores` (a verl reward file reads `extra_info.get(...)` and those keys).
    A deep copy for every call, so what one call changes in it, at any depth, does not reach
    the row or the next call; anything else (the data loader refuses it for a custom
    function) a copy as it is."""
    if extra_info is None:
        extra_info = {}
    extra_info = own_copy(extra_info)
    if not isinstance(extra_info, Mapping):
        return extra_info
    return {**extra_info, "num_turns": SINGLE_TURN_NUM_TURNS, "rollout_reward_scores": {}}


def own_copy(value: Any) -> Any:
    """A deep copy of a row's `value` for one call; `value` itself where it holds what cannot
    be copied (a lock or an event a caller in Python shares on purpose: rows read from a
    data file never hold one)."""
    try:
        return copy.deepcopy(value)
    except (TypeError, copy.Error):  # "cannot pickle '_thread.lock' object"
        return value


@dataclass
class Scores:
    rewards: list[float]
    accuracy: list[float]


class RewardScorer:
    """Scores decoded responses row by row with the built-in rules or a custom function."""

    def __init__(
        self,
        path: str | None = None,
        name: str = "compute_score",
        timeout_s: float = 0.0,
        kwargs: Mapping[str, Any] | None = None,
    ):
        self.custom = bool(path)
        self.timeout_s = timeout_s
        # reward.kwargs: given to every call of the custom function, over its four keywords
        # where a name is the same, as verl's `_call_with_kwargs` gives reward_kwargs
        self.kwargs = dict(kwargs or {})
        self.name = name if path else default_compute_score.__name__
        self.where = f"reward.path {str(path)!r}" if path else "built-in reward"
        self.function: Callable = (
            load_reward_function(path, name, self.kwargs) if path else default_compute_score
        )
        self._loop: asyncio.AbstractEventLoop | None = None  # for an `async def` function

    def __call__(
        self,
        data_sources: Sequence[str],
        responses: Sequence[str],
        ground_truths: Sequence[Any],
        extra_infos: Sequence[Any] | None = None,
    ) -> Scores:
        extra_infos = extra_infos if extra_infos is not None else [None] * len(responses)
        rewards, accuracy = [], []
        for source, response, truth, row_extra in zip(
            data_sources, responses, ground_truths, extra_infos, strict=True
        ):
            extra = reward_extra_info(row_extra)
            result = self._call(source, response, own_copy(truth), extra)
            try:
                reward, acc = _score_and_accuracy(result)
            except _NotAScore as bad:
                raise self._failed(source, extra, f"{self.name} returned {bad}") from None
            rewards.append(reward)
            accuracy.append(acc)
        return Scores(rewards=rewards, accuracy=accuracy)

    def _call(self, source: str, response: str, truth: Any, extra: Any) -> Any:
        if not self.custom:  # the built-in rules: their errors are mfsdp's own, kept as raised
            return self.function(
                data_source=source, solution_str=response, ground_truth=truth, extra_info=extra
            )
        before, processes = set(threading.enumerate()), processes_alive()
        stuck = self._stuck(source, extra, processes)
        try:
            with user_code_output(), time_limit(self.timeout_s, stuck):
                keywords = dict(
                    data_source=source, solution_str=response, ground_truth=truth, extra_info=extra
                )
                # reward.kwargs over the four, as verl merges them; a copy for each call
                result = self.function(**(keywords | copy.deepcopy(self.kwargs)))
                return self._awaited(result) if inspect.isawaitable(result) else result
        # the user's code failed: only this call is guarded; sys.exit() in it is a failure too
        # (it ended the run with exit 0), Ctrl-C passes
        except (Exception, SystemExit) as err:
            end_processes_started_since(processes)
            raise self._failed(source, extra, f"{self.name} raised {error_line(err)}") from err
        except RewardTimeout:
            end_processes_started_since(processes)
            late = f"{self.name} did not return within {self.timeout_s:g} s (reward.timeout_s)"
            failed = self._failed(source, extra, late)
            failed.abandons_threads = _threads_left(before)
            raise failed from None

    def _awaited(self, awaitable: Any) -> Any:
        """What an `async def` function's call gives once awaited (verl awaits it; unawaited
        it was "not a number"), run on one event loop kept for the scorer's life, as verl's
        reward loop keeps one: a client the function opened on an earlier call still works
        on the next. The loop is closed with the scorer, its pending calls not run on."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            weakref.finalize(self, self._loop.close)
        return self._loop.run_until_complete(awaitable)

    def _stuck(
        self, source: Any, extra: Any, processes: set[multiprocessing.process.BaseProcess]
    ) -> Callable[[], Any]:
        """What the time limit calls when the call ran on in C code past it, never seeing
        the signal: end the processes it started since `processes`, report the error and
        end the run (no caller can catch it), on the stdout of now, not the user code's (its
        prints go to stderr)."""
        stdout = sys.stdout
        stopped = (
            f"{self.name} did not return within {self.timeout_s:g} s (reward.timeout_s) nor"
            f" stop within {STUCK_GRACE_S:g} s more (it runs in C code, such as a power of huge"
            " integers, or catches the stop), so the run was stopped"
        )

        def stop() -> None:
            end_processes_started_since(processes)
            restore_command_stdout()  # the user's code still runs with descriptor 1 on stderr
            sys.stdout = stdout
            report_stranded(self._failed(source, extra, stopped))

        return stop

    def _failed(self, source: Any, extra: Any, what: str) -> RewardFunctionError:
        index = extra.get("index") if isinstance(extra, Mapping) else None
        row = f"data_source {str(source)!r}" + (f" (index {index})" if index is not None else "")
        return RewardFunctionError(f"{self.where}, {row}: {what}")


def _threads_left(before: set[threading.Thread]) -> bool:
    """Whether the stopped call left threads of its own that exit would wait for (a reward
    function waiting on a worker thread it started: the process hung at exit after its
    error line)."""
    return any(not thread.daemon for thread in threads_started_since(before))


class _NotAScore(RewardFunctionError):
    """What a reward function returned is not a score; the message says what it was (caught
    and reraised with the file, function and row it came from)."""


def _score_and_accuracy(result: Any) -> tuple[float, float]:
    """The reward and accuracy of one row from what the score function returned."""
    if isinstance(result, Mapping):
        if "score" not in result:
            keys = ", ".join(repr(key) for key in list(result)[:8])
            raise _NotAScore(f"a dict without 'score' (its keys: {keys or 'none'})")
        reward = _finite(result["score"], "score ")
        if "acc" in result:
            return reward, _finite(result["acc"], "acc ")
        return reward, float(reward > 0)
    reward = _finite(result)
    return reward, float(reward > 0)


# torch.finfo(torch.float32).max: a score past it was finite here, then infinity in the
# float32 rewards, and the run stopped with "gradient norm is nan", blaming the gradient
FLOAT32_MAX = float.fromhex("0x1.fffffep+127")

_short = reprlib.Repr()
_short.maxstring = _short.maxother = 60


def _finite(value: Any, label: str = "") -> float:
    """`value` as a float, cast as verl casts a score (`float()`: a bool is 1.0 or 0.0); a
    string, None, NaN, infinity or a number past float32's range is not a score."""
    if isinstance(value, (str, bytes)):  # float("0.5") works, but a score is a number
        raise _not_a_number(value, label)
    try:
        number = float(value)
    except (Exception, SystemExit):  # its __float__ is the user's (a 2-value tensor raises)
        raise _not_a_number(value, label) from None
    if not isfinite(number):
        raise _NotAScore(f"{label}{number}, not a finite number")
    if abs(number) > FLOAT32_MAX:  # the rewards become a float32 tensor: infinity there
        raise _NotAScore(f"{label}{number}, not a finite number in float32 (|x| <= 3.4e38)")
    return number


def _not_a_number(value: Any, label: str) -> _NotAScore:
    return _NotAScore(f"{label}{_short.repr(value)} ({type(value).__name__}), not a number")
