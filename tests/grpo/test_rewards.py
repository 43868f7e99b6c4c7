"""Rule rewards (gsm8k, math), dispatch by data_source, and custom reward files."""

import json

import pytest
import torch

from mfsdp_ckpt.errors import EXIT_FAILED, EXIT_USAGE
from tests.support.interop_layouts import one_error_line, run_cli
from tests.support.paths import REPO
from trainer.rewards import gsm8k, math
from trainer.rewards.custom import RewardError, RewardFunctionError, load_reward_function
from trainer.rewards.dispatch import RewardScorer, default_compute_score


@pytest.mark.parametrize(
    "text, answer",
    [
        ("so 3 + 4 = 7\n#### 7", "7"),
        ("#### 1,234 apples", "1234"),
        ("total: #### 12.", "12."),
        ("#### -5", "-5"),
        ("first #### 3 then #### 4", "4"),
        ("the answer is 42", None),
        ("no numbers here", None),
    ],
)
def test_gsm8k_extraction(text, answer):
    assert gsm8k.extract_answer(text) == answer


def test_gsm8k_only_reads_the_last_300_chars():
    early = "#### 7\n" + "x" * 300
    assert gsm8k.extract_answer(early) is None
    assert gsm8k.compute_score(early, "7") == 0.0
    assert gsm8k.compute_score("x" * 400 + "#### 7", "7") == 1.0


def test_gsm8k_score():
    assert gsm8k.compute_score("#### 18", "18") == 1.0
    assert gsm8k.compute_score("#### 1,000", "1000") == 1.0
    assert gsm8k.compute_score("#### 17", "18") == 0.0
    assert gsm8k.compute_score("18", "18") == 0.0  # the rule needs ####


def test_math_last_boxed():
    assert math.last_boxed(r"a \boxed{1} then \boxed{\frac{1}{2}} end") == r"\frac{1}{2}"
    assert math.last_boxed(r"\boxed{x^{2}+1}") == "x^{2}+1"
    assert math.last_boxed(r"\fbox{5}") is None  # verl's remove_boxed reads no \fbox
    assert math.last_boxed(r"\boxed 7$") == "7"
    assert math.last_boxed(r"\boxed{unclosed") is None
    assert math.last_boxed("nothing") is None


@pytest.mark.parametrize(
    "answer, truth",
    [
        (r"\dfrac12", r"\frac{1}{2}"),
        ("0.5", r"\frac{1}{2}"),
        ("1/2", r"\frac{1}{2}"),
        (r"\left(3, 4\right)", "(3,4)"),
        (r"90^\circ", "90"),
        ("x = 3", "3"),
        (r"\sqrt3", r"\sqrt{3}"),
        (r"50\%", "50"),
        (r"10 \text{ inches}", "10"),
        (r"\$7", "7"),
        (".5", "0.5"),
    ],
)
def test_math_normalization_equivalences(answer, truth):
    assert math.normalize(answer) == math.normalize(truth)
    assert math.compute_score(rf"so \boxed{{{answer}}}", truth) == 1.0


def test_math_wrong_and_missing():
    assert math.compute_score(r"\boxed{3}", "4") == 0.0
    assert math.compute_score(r"\boxed{\frac{1}{3}}", r"\frac{1}{2}") == 0.0
    assert math.compute_score("3", "3") == 0.0  # no box
    # verl takes the ground truth as given: a boxed one is not unboxed, trailing zeros count
    assert math.compute_score(r"\boxed{3}", r"\boxed{3}") == 0.0
    assert math.compute_score(r"\boxed{5.00}", "5") == 0.0


def test_dispatch_by_data_source():
    assert default_compute_score("openai/gsm8k", "#### 5", "5") == 1.0
    assert default_compute_score("lighteval/MATH", r"\boxed{5}", "5") == 1.0
    assert default_compute_score("lighteval/MATH", "#### 5", "5") == 0.0  # math wants a box
    with pytest.raises(RewardError, match=r"data_source 'mystery'.*reward\.path"):
        default_compute_score("mystery", "5", "5")


def test_scorer_mixed_batch():
    scores = RewardScorer()(
        ["openai/gsm8k", "lighteval/MATH", "openai/gsm8k"],
        ["#### 3", r"\boxed{2}", "#### 9"],
        ["3", "2", "4"],
    )
    assert scores.rewards == [1.0, 1.0, 0.0]
    assert scores.accuracy == [1.0, 1.0, 0.0]


def test_custom_reward_file(tmp_path):
    file = tmp_path / "my_reward.py"
    file.write_text(
        "def length_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return {'score': len(solution_str) / 10, 'acc': float(solution_str == ground_truth)}\n"
        "NOT_A_FUNCTION = 3\n"
    )
    scorer = RewardScorer(str(file), "length_score")
    scores = scorer(["anything", "x"], ["abcde", "ok"], ["abcde", "no"], [{"index": 0}, None])
    assert scores.rewards == [0.5, 0.2]
    assert scores.accuracy == [1.0, 0.0]
    with pytest.raises(RewardError, match="defines no such function"):
        load_reward_function(file, "missing")
    with pytest.raises(RewardError, match="not callable"):
        load_reward_function(file, "NOT_A_FUNCTION")
    with pytest.raises(RewardError, match="no such file"):
        load_reward_function(tmp_path / "absent.py")
    broken = tmp_path / "broken.py"
    broken.write_text("import nonexistent_module_xyz\n")
    with pytest.raises(RewardError, match="importing it failed: ModuleNotFoundError"):
        load_reward_function(broken)


VERL_SIGNATURE = "data_source, solution_str, ground_truth, extra_info=None"
NOT_FLOAT32 = "not a finite number in float32 (|x| <= 3.4e38)"


def _reward_file(tmp_path, body: str, signature: str = VERL_SIGNATURE):
    file = tmp_path / "bad_reward.py"
    file.write_text(f"import math\n\ndef compute_score({signature}):\n    {body}\n")
    return file


@pytest.mark.parametrize(
    "body, what",
    [
        ("raise ValueError('boom')", "compute_score raised ValueError: boom"),
        ("raise KeyError('answer')", "compute_score raised KeyError: 'answer'"),
        ("raise RuntimeError('first\\nsecond')", "compute_score raised RuntimeError: first ..."),
        ("assert False", "compute_score raised AssertionError"),
        ("return 'high'", "compute_score returned 'high' (str), not a number"),
        ("return '0.5'", "compute_score returned '0.5' (str), not a number"),
        ("return None", "compute_score returned None (NoneType), not a number"),
        ("return [1.0]", "compute_score returned [1.0] (list), not a number"),
        ("return float('nan')", "compute_score returned nan, not a finite number"),
        ("return -math.inf", "compute_score returned -inf, not a finite number"),
        # finite here, infinity in the float32 rewards: the run stopped at "gradient norm is nan"
        ("return 1e39", f"compute_score returned 1e+39, {NOT_FLOAT32}"),
        ("return {'score': -3.5e38}", f"compute_score returned score -3.5e+38, {NOT_FLOAT32}"),
        ("return {'score': 'high'}", "compute_score returned score 'high' (str), not a number"),
        ("return {'score': math.nan}", "compute_score returned score nan, not a finite number"),
        (
            "return {'score': 1.0, 'acc': 'yes'}",
            "compute_score returned acc 'yes' (str), not a number",
        ),
        ("return {'acc': 1.0}", "compute_score returned a dict without 'score' (its keys: 'acc')"),
    ],
)
def test_a_failing_reward_function_is_one_line_naming_file_function_and_row(tmp_path, body, what):
    file = _reward_file(tmp_path, body)
    scorer = RewardScorer(str(file))
    with pytest.raises(RewardFunctionError) as raised:
        scorer(["ok", "addition"], ["7", "7"], ["7", "7"], [{"index": 2}, {"index": 5}])
    assert str(raised.value) == f"reward.path {str(file)!r}, data_source 'ok' (index 2): {what}"
    assert raised.value.exit_code == EXIT_FAILED  # the run failed, as a failed step does


def test_float32s_largest_reward_is_a_score(tmp_path):
    largest = torch.finfo(torch.float32).max
    scores = RewardScorer(str(_reward_file(tmp_path, f"return -{largest!r}")))(["a"], ["x"], ["y"])
    assert scores.rewards == [-largest]
    assert torch.tensor(scores.rewards, dtype=torch.float32).isfinite().all()


def test_a_failing_row_without_an_index_is_named_by_its_data_source(tmp_path):
    file = tmp_path / "second_row_fails.py"
    file.write_text(
        f"def compute_score({VERL_SIGNATURE}):\n"
        "    if solution_str == 'x':\n"
        "        raise ValueError('boom')\n"
        "    return 1.0\n"
    )
    with pytest.raises(RewardFunctionError) as raised:
        RewardScorer(str(file), "compute_score")(["a", "b"], ["7", "x"], ["7", "7"])
    assert str(raised.value) == (
        f"reward.path {str(file)!r}, data_source 'b': compute_score raised ValueError: boom"
    )
    assert isinstance(raised.value.__cause__, ValueError)  # kept for a debugger


@pytest.mark.parametrize(
    "signature, why",
    [
        ("*args", "got an unexpected keyword argument 'data_source'"),
        ("data_source, solution_str, ground_truth", "unexpected keyword argument 'extra_info'"),
        ("data_source, solution_str, ground_truth, extra_info, style", "missing a required"),
    ],
)
def test_a_function_verl_could_not_call_is_refused_when_loaded(tmp_path, signature, why):
    file = _reward_file(tmp_path, "return 0.0", signature)
    with pytest.raises(RewardError) as raised:
        RewardScorer(str(file))
    message = str(raised.value)
    assert message.startswith(f"reward.name 'compute_score' in {str(file)!r} cannot be called as")
    assert why in message and raised.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize(
    "signature, solution",
    [
        (VERL_SIGNATURE, "solution_str"),
        ("**kwargs", "kwargs['solution_str']"),
        ("*args, **kwargs", "kwargs['solution_str']"),
    ],
)
def test_valid_functions_score_as_verl_casts_them(tmp_path, signature, solution):
    numbers = tmp_path / "numbers.py"
    numbers.write_text(
        "import numpy as np\n"
        "VALUES = [True, False, 2, np.float32(0.5), np.int64(-1), {'score': True, 'acc': False}]\n"
        f"def compute_score({signature}):\n"
        f"    return VALUES[int({solution})]\n"
    )
    scores = RewardScorer(str(numbers))(["s"] * 6, [str(i) for i in range(6)], ["t"] * 6)
    assert scores.rewards == [1.0, 0.0, 2.0, 0.5, -1.0, 1.0]  # a bool is 1.0 / 0.0, as in verl
    assert scores.accuracy == [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]


def test_the_built_in_rules_keep_their_own_errors():
    with pytest.raises(RewardError, match="no built-in reward for data_source 'mystery'"):
        RewardScorer()(["mystery"], ["5"], ["5"])


def test_a_raising_reward_function_ends_a_grpo_run_in_one_line_and_json(tmp_path):
    reward, (code, out, err) = _one_grpo_step_scored_by(tmp_path, "raise ValueError('boom')")
    assert code == EXIT_FAILED, err
    line = one_error_line(err)
    assert line.startswith(
        f"error: reward.path {str(reward)!r}, data_source 'openai/gsm8k' (index "
    )
    assert line.endswith("): compute_score raised ValueError: boom"), line
    assert "Traceback" not in err
    assert json.loads(out) == {"error": line.removeprefix("error: "), "exit_code": EXIT_FAILED}


@pytest.mark.parametrize(
    "code, shown",
    [("sys.exit(0)", "SystemExit: 0"), ("sys.exit()", "SystemExit"), ("exit('bye')", "bye")],
)
def test_sys_exit_while_importing_a_reward_file_is_a_reward_error_naming_it(tmp_path, code, shown):
    """sys.exit(0) at import ended `mfsdp train grpo` with exit 0, nothing trained, no line."""
    file = tmp_path / "exits.py"
    file.write_text(f"import sys\n{code}\n")
    with pytest.raises(RewardError) as raised:
        load_reward_function(file)
    assert str(raised.value).startswith(f"reward.path {str(file)!r}: importing it failed: ")
    assert shown in str(raised.value)
    assert raised.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize("code, shown", [("sys.exit(0)", "SystemExit: 0"), ("sys.exit()", "")])
def test_sys_exit_inside_compute_score_fails_the_row_like_an_exception(tmp_path, code, shown):
    file = _reward_file(tmp_path, f"import sys; {code}")
    with pytest.raises(RewardFunctionError) as raised:
        RewardScorer(str(file))(["ok"], ["7"], ["7"], [{"index": 3}])
    assert str(raised.value) == (
        f"reward.path {str(file)!r}, data_source 'ok' (index 3): compute_score raised "
        f"{shown or 'SystemExit'}"
    )
    assert raised.value.exit_code == EXIT_FAILED
    assert isinstance(raised.value.__cause__, SystemExit)


def test_ctrl_c_in_a_reward_file_still_stops_the_run(tmp_path):
    interrupted = _reward_file(tmp_path, "raise KeyboardInterrupt")
    with pytest.raises(KeyboardInterrupt):
        RewardScorer(str(interrupted))(["ok"], ["7"], ["7"])
    at_import = tmp_path / "interrupt_at_import.py"
    at_import.write_text("raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        load_reward_function(at_import)


def test_a_reward_files_prints_go_to_stderr_not_stdout(tmp_path, capsys):
    """stdout is the command's own: `--json` writes one JSON object there."""
    file = tmp_path / "chatty.py"
    file.write_text(
        "print('LOADING')\n"
        f"def compute_score({VERL_SIGNATURE}):\n"
        "    print('SCORING', solution_str)\n"
        "    return 1.0\n"
    )
    scores = RewardScorer(str(file))(["s"], ["7"], ["7"])
    assert scores.rewards == [1.0]
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "LOADING\nSCORING 7\n"
    print("mine")  # stdout is restored after the user's code
    assert capsys.readouterr().out == "mine\n"


@pytest.mark.parametrize(
    "source, response, truth",
    [
        ("openai/gsm8k", "#### 72", 72),
        ("openai/gsm8k", "#### 72", 72.0),
        ("lighteval/MATH", r"\boxed{72}", 72),
        ("lighteval/MATH", r"\boxed{72}", 72.0),
    ],
)
def test_a_ground_truth_that_is_a_whole_number_is_compared_as_its_text(source, response, truth):
    """The built-in rules compare text, as verl's do; a whole number column is its decimal
    text (math's rule raised AttributeError on an int). Other numbers are refused
    (tests/grpo/test_number_ground_truth_is_text_when_whole.py)."""
    assert default_compute_score(source, response, truth) == 1.0
    assert default_compute_score(source, response.replace("72", "71"), truth) == 0.0


def test_a_reward_function_that_prints_and_exits_ends_a_grpo_run_in_one_line_and_json(tmp_path):
    """Its print went to stdout ahead of --json's object, and its sys.exit(0) ended the run
    with exit 0 and no message."""
    _reward, (code, out, err) = _one_grpo_step_scored_by(
        tmp_path, "print('SCORING', solution_str); import sys; sys.exit(0)"
    )
    assert code == EXIT_FAILED, err
    line = one_error_line(err)
    assert line.endswith("): compute_score raised SystemExit: 0"), line
    assert json.loads(out) == {"error": line.removeprefix("error: "), "exit_code": EXIT_FAILED}
    assert "SCORING" in err


def _one_grpo_step_scored_by(tmp_path, body: str, *overrides: str):
    """(the reward file, `mfsdp train grpo --json`'s (exit code, stdout, stderr)) for one tiny
    GRPO step on synthetic data scored by a compute_score whose body is `body`."""
    from trainer.grpo.synthetic import write_addition_data

    files = write_addition_data(tmp_path / "data", digits=4)
    reward = _reward_file(tmp_path, body)
    return reward, run_cli(
        *("train", "grpo", "--config", REPO / "examples" / "grpo_tiny_cpu.yaml", "--json"),
        *(f"data.train_files={files['rl_train']}", f"trainer.run_dir={tmp_path / 'run'}"),
        *("data.val_files=[]", "trainer.total_steps=1", "data.train_batch_size=2"),
        *("rollout.n=2", "rollout.max_response_length=2", "actor.ppo_mini_batch_size=2"),
        *("actor.ppo_micro_batch_size_per_gpu=2", "actor.log_prob_micro_batch_size_per_gpu=2"),
        f"reward.path={reward}",
        *overrides,
    )


@pytest.mark.parametrize(
    "body",
    [
        "while True: pass",
        "import time; time.sleep(60)",
        # the usual guard around a fragile check does not swallow the time limit
        "import time\n    try:\n        time.sleep(60)\n    except Exception:\n        return 0.0",
        # nor does a bare except: the limit is raised again a second later
        "import time\n    try:\n        time.sleep(60)\n    except:\n        pass\n"
        "    time.sleep(60)",
        # a timeout of its own on the process's alarm (as math_verify's), set and cleared
        # first, cancelled an alarm-timer limit and the run hung
        "import signal\n    old = signal.signal(signal.SIGALRM, lambda *a: None)\n"
        "    signal.alarm(5)\n    signal.alarm(0)\n    signal.signal(signal.SIGALRM, old)\n"
        "    while True: pass",
    ],
)
def test_a_reward_function_that_never_returns_stops_at_its_time_limit(tmp_path, body):
    """A custom reward that never returned hung the run (every rank waits on scoring)."""
    import signal
    import threading
    import time

    from trainer.rewards.time_limit import WATCHDOG_NAME

    file = _reward_file(tmp_path, body)
    scorer = RewardScorer(str(file), timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(RewardFunctionError) as raised:
        scorer(["ok"], ["7"], ["7"], [{"index": 4}])
    assert time.monotonic() - started < 5
    assert str(raised.value) == (
        f"reward.path {str(file)!r}, data_source 'ok' (index 4): compute_score did not return"
        " within 0.5 s (reward.timeout_s)"
    )
    # nothing left armed to go off later in the run
    assert not [t for t in threading.enumerate() if t.name == WATCHDOG_NAME]
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL


def test_a_reward_function_within_its_time_limit_scores_and_leaves_no_timer(tmp_path):
    import signal
    import threading

    from trainer.rewards.time_limit import WATCHDOG_NAME

    file = _reward_file(tmp_path, "import time; time.sleep(0.05); return 1.0")
    scores = RewardScorer(str(file), timeout_s=5)(["ok"] * 3, ["7"] * 3, ["7"] * 3)
    assert scores.rewards == [1.0, 1.0, 1.0]
    assert not [t for t in threading.enumerate() if t.name == WATCHDOG_NAME]
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL


def test_a_grpo_run_whose_reward_function_hangs_stops_in_one_line_and_json(tmp_path):
    _reward, (code, out, err) = _one_grpo_step_scored_by(
        tmp_path, "while True: pass", "reward.timeout_s=1"
    )
    assert code == EXIT_FAILED, err
    line = one_error_line(err)
    assert line.endswith("): compute_score did not return within 1 s (reward.timeout_s)"), line
    assert json.loads(out) == {"error": line.removeprefix("error: "), "exit_code": EXIT_FAILED}


def _one_grpo_step_in_a_fresh_process(tmp_path, body: str):
    """`mfsdp train grpo --json` of one tiny step in a fresh interpreter, as a user runs it,
    scored by a compute_score whose body is `body` under reward.timeout_s=1."""
    from tests.support.fresh_python import mfsdp
    from trainer.grpo.synthetic import write_addition_data

    files = write_addition_data(tmp_path / "data", digits=4)
    reward = _reward_file(tmp_path, body)
    return mfsdp(
        "train", "grpo", "--config", str(REPO / "examples" / "grpo_tiny_cpu.yaml"), "--json",
        f"data.train_files={files['rl_train']}", f"trainer.run_dir={tmp_path / 'run'}",
        "data.val_files=[]", "trainer.total_steps=1", "data.train_batch_size=2",
        "rollout.n=2", "rollout.max_response_length=2", "actor.ppo_mini_batch_size=2",
        "actor.ppo_micro_batch_size_per_gpu=2", "actor.log_prob_micro_batch_size_per_gpu=2",
        f"reward.path={reward}", "reward.timeout_s=1",
    )  # fmt: skip


def test_a_timed_out_reward_waiting_on_its_own_thread_does_not_keep_the_run_alive(tmp_path):
    """The run printed its error line, then hung at exit: Python joins every non-daemon
    thread, and the reward function's worker never ended. A real process, as a user runs it."""
    body = (
        "import concurrent.futures, time\n"
        "    return concurrent.futures.ThreadPoolExecutor(1).submit(time.sleep, 3600).result()"
    )
    done = _one_grpo_step_in_a_fresh_process(tmp_path, body)
    assert done.returncode == EXIT_FAILED, done.stderr
    line = one_error_line(done.stderr)
    assert line.endswith("): compute_score did not return within 1 s (reward.timeout_s)"), line
    assert json.loads(done.stdout) == {"error": line.removeprefix("error: "), "exit_code": 1}


def test_a_reward_function_stuck_in_c_code_stops_the_run_in_one_line_and_json(tmp_path):
    """Code that runs in C never sees the time limit's signal (a key derivation here; a
    power of huge integers from a response's `9**9**9` in a math reward): the run hung for
    as long as it ran, minutes to forever. A real process, as a user runs it."""
    import time

    from trainer.rewards.time_limit import STUCK_GRACE_S

    # minutes in C, in one call that never returns to Python (and releases its lock)
    body = "import hashlib; return hashlib.pbkdf2_hmac('sha256', b'x', b'y', 3 * 10**8)[0]"
    started = time.monotonic()
    done = _one_grpo_step_in_a_fresh_process(tmp_path, body)
    assert time.monotonic() - started < 120 + STUCK_GRACE_S
    assert done.returncode == EXIT_FAILED, done.stderr
    line = one_error_line(done.stderr)
    assert "compute_score did not return within 1 s (reward.timeout_s) nor stop within" in line
    assert line.endswith("so the run was stopped"), line
    assert json.loads(done.stdout) == {"error": line.removeprefix("error: "), "exit_code": 1}


def test_a_reward_function_holding_the_interpreter_in_c_code_still_ends_the_run(tmp_path):
    """A power of huge integers holds the interpreter's lock, so not even the watchdog
    thread runs: the run went on for as long as the power took (tens of seconds for this
    one, forever for a response's 9**9**9). The fault handler, which needs no lock, ends it."""
    import subprocess
    import sys
    import time

    from trainer.rewards.time_limit import HELD_GRACE_S

    file = _reward_file(tmp_path, "return float(pow(3, 5 * 10**7) % 2)")
    score = (
        "import sys; from trainer.rewards.dispatch import RewardScorer;"
        f" RewardScorer({str(file)!r}, timeout_s=1)(['ok'], ['7'], ['7'], [{{'index': 4}}])"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", score], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert time.monotonic() - started < 1 + HELD_GRACE_S + 15, done.stderr
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("Timeout (0:00:11)!"), done.stderr
    assert f'File "{file}", line 4 in compute_score' in done.stderr, done.stderr


def test_a_time_limit_past_the_platforms_clock_scores_and_leaves_no_handler(tmp_path):
    """reward.timeout_s=1e10 made arming the fault handler raise OverflowError ("timestamp
    out of range"), blamed on the user's function, with SIGALRM's handler left installed."""
    import signal
    import threading

    file = _reward_file(tmp_path, "return 1.0")
    failures: list = []
    hook, threading.excepthook = threading.excepthook, failures.append
    try:
        assert RewardScorer(str(file), timeout_s=1e10)(["ok"], ["7"], ["7"]).rewards == [1.0]
    finally:
        threading.excepthook = hook
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
    # the watchdog waited, as it does for any limit, rather than dying on the wait
    assert [f.exc_type for f in failures] == []
