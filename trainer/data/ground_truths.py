"""The ground truth of a GSM8K answer and of a MATH solution, read as verl's preprocessing
reads them: what `mfsdp data gsm8k|math` converts, and so what tells that a table's rows are
those datasets' own (`table_kinds`): a question/answer table whose answers hold no
`#### <number>` is no GSM8K file, and its converter refuses it."""

from __future__ import annotations

from trainer.rewards import gsm8k, math


def gsm8k_ground_truth(answer: str) -> str:
    """The number of the answer's first `#### <number>`, commas removed, as verl's
    examples/data_preprocess/gsm8k.py extracts it, with the pattern the GSM8K reward reads a
    response by. What followed the marker was kept whole ("72 dollars", "7\nThat is all.",
    "$72"), a ground truth no response's answer matches, so every reward of the row was 0;
    an answer without the pattern (`####72`, a marker with nothing after it) is refused."""
    found = gsm8k.ANSWER.search(answer)
    if found is None:
        raise ValueError(
            "answer has no '#### <number>' line ('#### ' then digits, as the GSM8K reward reads"
            " a response's answer)"
        )
    return found.group(1).replace(",", "")


def math_ground_truth(solution: str) -> str:
    """The answer of the solution's `\\boxed` as verl's examples/data_preprocess/
    math_dataset.py extracts it (`remove_boxed(last_boxed_only_string(solution))`), read by
    the MATH reward's own reader (`math.boxed_answer`), so that a row's ground truth and its
    responses' answers are read alike: a `\\boxed ` (space) anywhere wins, else the last
    `\\boxed{...}`. A solution verl's preprocessing fails on (no `\\boxed`, an `\\fbox`
    alone, a last `\\boxed` without `{`, a brace never closed) raises ValueError saying
    which, as does an empty answer, which no response could match."""
    truth = math.boxed_answer(solution, "solution")
    if not truth.strip():
        form = "'\\boxed '" if "\\boxed " in solution else "\\boxed{}"
        raise ValueError(f"solution's last {form} is empty")
    return truth
