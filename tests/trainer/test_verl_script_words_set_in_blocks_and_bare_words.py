"""`mfsdp config from-verl` on a word of the verl command whose overrides themselves come
from a variable set in a block that may not run, and on a word verl's Hydra refuses.

Was: `"${EXTRA[@]}"` after `if [ "$USE_LORA" = 1 ]; then EXTRA=(...lora_rank=64); fi`
(and `$EXTRA`, `EXTRA+=(...)`, a loop, `&&`/`||`, a `case` arm, a function, a subshell)
converted at exit 0 without the LoRA keys and without a word: only a key whose value used
such a variable was flagged, never the words it holds. A word without `=` (`optim.lr 5e-7`,
a stray `x`, an array's element, the `' '` of a space after a trailing backslash) was
dropped at exit 0, where Hydra refuses it and verl never starts.

Each script is run by bash too, the verl command replaced by one printing its arguments:
the words verl gets there are those the test expects to be flagged or refused.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from trainer.verl_import import convert_verl
from trainer.verl_source import VerlSourceError

VERL = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo"
LORA = "actor_rollout_ref.model.lora_rank=64"


def _bash_words(tmp_path: Path, text: str, environment: dict[str, str]) -> list[str]:
    """The words bash gives the verl command of `text`, run with `environment`."""
    shown = text.replace("python3 -m verl.trainer.main_ppo", "printf '%s\\0' >&3")
    done = subprocess.run(
        ["bash", "-c", f"exec 3>&1 >/dev/null 2>&1\n{shown}"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", **environment},
    )
    return done.stdout.split("\0")[:-1]


def _convert(tmp_path: Path, text: str):
    script = tmp_path / "run.sh"
    script.write_text(text)
    return convert_verl(script)


IF_LORA = 'if [ "$USE_LORA" = 1 ]; then'
SPREAD = f'{VERL} "${{EXTRA[@]}}"'
# each script's lines; the block sets LORA where USE_LORA=1
BLOCKS = {
    "if-array": ["EXTRA=()", IF_LORA, f"  EXTRA=({LORA})", "fi", SPREAD],
    "if-array-appended": ["EXTRA=()", IF_LORA, f"  EXTRA+=({LORA})", "fi", SPREAD],
    "if-array-on-one-line": ["EXTRA=()", f"{IF_LORA} EXTRA=({LORA}); fi", SPREAD],
    "if-array-unset-outside": [IF_LORA, f"  EXTRA=({LORA})", "fi", SPREAD],
    "if-scalar-split": ['EXTRA=""', IF_LORA, f'  EXTRA="{LORA}"', "fi", f"{VERL} $EXTRA"],
    "and-list": ["EXTRA=()", f'[ "$USE_LORA" = 1 ] && EXTRA=({LORA})', SPREAD],
    "or-list": ["EXTRA=()", f'[ "$USE_LORA" != 1 ] || EXTRA+=({LORA})', SPREAD],
    "case-arm": [
        'EXTRA=""',
        'case "$USE_LORA" in',
        f'  1) EXTRA="{LORA}";;',
        "esac",
        f"{VERL} $EXTRA",
    ],
    "function-in-a-branch": [
        'EXTRA=""',
        f'lora() {{ EXTRA="{LORA}"; }}',
        '[ "$USE_LORA" = 1 ] && lora',
        f"{VERL} $EXTRA",
    ],
    "loop": [
        "EXTRA=()",
        f'for k in $USE_LORA; do EXTRA=("${{EXTRA[@]}}" {LORA}); done',
        SPREAD,
    ],
    "subshell": ['EXTRA=""', f'[ "$USE_LORA" = 1 ] && (EXTRA="{LORA}"; true)', f"{VERL} $EXTRA"],
}


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_words_a_block_sets_are_named_with_its_line(tmp_path, name):
    text = "\n".join(BLOCKS[name]) + "\n"
    taken = _bash_words(tmp_path, text, {"USE_LORA": "1"})
    left = _bash_words(tmp_path, text, {"USE_LORA": ""})
    conversion = _convert(tmp_path, text)
    flagged = [item for item in conversion.incomplete if "set in a block that may not run" in item]
    if name == "subshell":  # bash sets it in the subshell only: verl never gets it
        assert LORA not in taken
    else:
        assert LORA in taken
    assert LORA not in left
    line = next(at for at, row in enumerate(text.splitlines(), 1) if LORA in row)
    assert len(flagged) == 1 and flagged[0].endswith(f"line {line})"), conversion.incomplete
    assert "lora_rank" not in str(conversion.tree)


def test_an_array_set_before_and_grown_in_a_loop_flags_both(tmp_path):
    """The key the array holds outside the loop is read, flagged; the word is named for
    the keys the loop adds, which verl gets after a pass."""
    text = (
        "A=(algorithm.adv_estimator=grpo)\n"
        'for i in 1; do A=("${A[@]}" actor_rollout_ref.actor.optim.lr=5e-7); done\n'
        'python3 -m verl.trainer.main_ppo "${A[@]}" trainer.total_epochs=2\n'
    )
    assert "actor_rollout_ref.actor.optim.lr=5e-7" in _bash_words(tmp_path, text, {})
    conversion = _convert(tmp_path, text)
    assert conversion.incomplete[:2] == [
        "${A[@]} (set in a block that may not run, line 2)",
        "algorithm.adv_estimator=grpo",
    ]
    assert conversion.tree["trainer"]["epochs"] == 2


def test_an_array_set_surely_converts_as_before(tmp_path):
    text = f'EXTRA=({LORA})\n{VERL} "${{EXTRA[@]}}"\n'
    conversion = _convert(tmp_path, text)
    assert not [item for item in conversion.incomplete if "block" in item]
    assert conversion.tree["model"]["lora_rank"] == 64


BARE = {
    "missing-equals": (
        f"{VERL} actor_rollout_ref.actor.optim.lr 5e-7 trainer.total_epochs=2\n",
        "actor_rollout_ref.actor.optim.lr",
    ),
    "stray-word": (f"{VERL} x\n", "x"),
    "function-called-without-its-argument": (f'f() {{\n  {VERL} "$1"\n}}\nf\n', ""),
    "array-element": (f'A=(x y)\n{VERL} "${{A[@]}}"\n', "x"),
    "empty-quoted-variable": (f'E=""\n{VERL} "$E"\n', ""),
    "space-after-a-backslash-ending-the-file": (f"{VERL} trainer.total_epochs=2 \\ ", " "),
    "space-after-the-backslash": (
        f"{VERL} \\\n    data.train_batch_size=8 \\ \n    trainer.total_epochs=2\n",
        " ",
    ),
}


@pytest.mark.parametrize("name", sorted(BARE))
def test_a_word_hydra_refuses_is_refused_naming_it(tmp_path, name):
    text, word = BARE[name]
    assert word in _bash_words(tmp_path, text, {})
    with pytest.raises(VerlSourceError) as refused:
        _convert(tmp_path, text)
    message = str(refused.value)
    assert f"verl receives {word!r} as an override without '='" in message, message
    assert "the verl command at line " in message and "\n" not in message


NOT_REFUSED = {
    "hydra-options": f"{VERL} --config-path ./cfg --config-name ppo_trainer\n",
    "hydra-delete": f"{VERL} ~trainer.logger\n",
    "redirections": f"{VERL} trainer.total_epochs=2 > log.txt 2>&1\n",
    "pipe": f"{VERL} trainer.total_epochs=2 2>&1 | tee log\n",
    "variable-not-set-by-the-script": f'{VERL} "$EXTRA"\n',
    "the-scripts-own-argument": f'{VERL} "${{1:-}}"\n',
}


@pytest.mark.parametrize("name", sorted(NOT_REFUSED))
def test_words_hydra_takes_or_not_known_here_are_not_refused(tmp_path, name):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "ppo_trainer.yaml").write_text("trainer:\n  total_epochs: 3\n")
    conversion = _convert(tmp_path, NOT_REFUSED[name])
    assert conversion.tree["algorithm"]["adv_estimator"] == "grpo"


def test_a_quoted_variable_the_script_does_not_set_is_named(tmp_path):
    conversion = _convert(tmp_path, f'{VERL} "$EXTRA"\n')
    assert any(note.startswith("$EXTRA: a value known only when") for note in conversion.notes)
