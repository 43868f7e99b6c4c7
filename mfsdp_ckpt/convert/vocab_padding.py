"""Megatron's vocabulary padding: which stored row counts are `vocab_size` plus padding.

Megatron-LM builds the embedding and the output layer with `padded_vocab_size` rows:
vocab_size rounded up to a multiple of `--make-vocab-size-divisible-by` (default 128)
times the tensor-parallel size. Megatron-Bridge pads the same way when its model provider
pads, with divisible-by the largest power of two up to 128 that divides vocab_size. The
rows past vocab_size belong to no token; when Megatron-Bridge converts such a checkpoint
to Hugging Face it drops them, so the exported model has the config's vocab_size rows.

The rule used here: `rows` stored rows are `vocab_size` plus Megatron's padding when
rows > vocab_size and rows is vocab_size rounded up to a multiple of m = d * k, for d a
power of two up to 128 (the divisible-by setting) and k from 1 to 64 (the tensor-parallel
size, or the odd factor of a divisible-by setting such as 1280 = 128 * 10). The padding is
then fewer than m <= 8192 rows, and the stored rows are a multiple of m. Any other excess
is not padding but a config that belongs to another model (a larger vocabulary), and
dropping rows would cut real tokens: refused. Fewer rows than vocab_size is refused too:
the config names tokens the checkpoint has no weights for.

That rule is a guess at settings the checkpoint may record; where its record holds them
(`RecordedPadding`, read by `recorded_layout`):

* Megatron-LM's args record the rows it built as `padded_vocab_size`, and then the stored
  rows must be exactly that many. Megatron-LM pads only when padded_vocab_size is unset, and
  `--use-checkpoint-args` carries it over from the checkpoint it started from, which may
  have been converted at another tensor-parallel size: so the rows need not be the padding
  of the run's own make_vocab_size_divisible_by times tensor_model_parallel_size, and the
  excess over the config's vocab_size is held to the guess above.
* args without padded_vocab_size (and Megatron-Bridge's run_config.yaml with
  should_pad_vocab true) hold Megatron's `vocab_size_with_padding` of the config's
  vocab_size, ceil(V / (d * tp)) * d * tp, and nothing else is accepted: 256 rows under a
  config of 100 tokens look like padding to the guess (d = 256), but a run padding by 128
  made 256 rows for a tokenizer of 129 to 256 tokens, and the rows past 100 are real ones.
* should_pad_vocab false (Megatron-Bridge, and verl's transformer_config.json of a Bridge
  model) holds vocab_size rows exactly. verl's transformer_config.json without it holds
  no vocabulary setting at all, and the guess decides.
* `args` holding None is an import's (`import-hf --layout mcore`; no training run saves
  it): the Hugging Face model's rows, unpadded, so vocab_size rows exactly. More is a
  config of another model, never padding to drop.

Rows other than the padded_vocab_size the record states contradict the record whatever the
config says (`StoredShapeError`: the checkpoint is wrong); every other problem is the
config's (`ShapeError`: the user's config when they gave one).

Megatron-LM pads its tokenizer's length, not the config's vocab_size: Qwen2.5's
tokenizer holds 151665 tokens, which it pads to 151680 rows, while Qwen2.5's config.json
says 151936. Rows fewer than the config's vocab_size that are exactly the padded size the
record states (`RecordedPadding.rows`, Megatron-LM's `padded_vocab_size`) are that case:
no token is missing, the config names more than the tokenizer has. Export writes them
under a config of that many rows (`recorded_vocab`), and training builds its model with
them; where a config still names more (model.overrides.vocab_size), the error says which
vocab_size fits.
"""

from __future__ import annotations

from dataclasses import dataclass

from mfsdp_ckpt.convert.mapping_errors import ShapeError, StoredShapeError

MAX_POWER_OF_TWO = 128  # Megatron-LM's default --make-vocab-size-divisible-by
MAX_FACTOR = 64  # tensor-parallel size (or an odd divisible-by factor)


def _multiples() -> tuple[int, ...]:
    powers = [1 << shift for shift in range(MAX_POWER_OF_TWO.bit_length())]
    return tuple(
        sorted({power * factor for power in powers for factor in range(1, MAX_FACTOR + 1)})
    )


_MULTIPLES = _multiples()


def padding_multiple(rows: int, vocab_size: int) -> int | None:
    """The smallest multiple m of the rule above that rounds `vocab_size` up to `rows`,
    or None when none does (or rows <= vocab_size: nothing to explain)."""
    if rows <= vocab_size:
        return None
    return next((m for m in _MULTIPLES if rows % m == 0 and rows - vocab_size < m), None)


@dataclass(frozen=True)
class RecordedPadding:
    """Megatron's padding as a checkpoint's record states it: the stored rows are `rows`
    where it states them (padded_vocab_size), else vocab_size rounded up to a multiple of
    `multiple` (make_vocab_size_divisible_by times the tensor-parallel size; 1 where the
    run padded nothing); `source` names the settings and the record, for an error line;
    `imported`: no run made the rows, an import wrote its model's (`multiple` 1)."""

    multiple: int | None  # None: only `rows` is stated
    source: str
    rows: int | None = None  # the padded size the record states (padded_vocab_size), if any
    imported: bool = False

    def rows_for(self, vocab_size: int) -> int:
        """The rows the run built for `vocab_size`: the stated ones, else Megatron's
        `vocab_size_with_padding` (megatron/core/tokenizers/utils/build_tokenizer.py,
        Megatron-Bridge's `calculate_padded_vocab_size`)."""
        if self.rows is not None:
            return self.rows
        multiple = self.multiple or 1
        return -(-vocab_size // multiple) * multiple


def vocab_rows_problem(
    rows: int, vocab_size: int, recorded: RecordedPadding | None = None
) -> str | None:
    """Why `rows` stored rows cannot be exported as `vocab_size` tokens, or None when they
    can: equal, or larger by Megatron's padding (the `recorded` rule where the checkpoint
    records one, else the guess above)."""
    found = _rows_problem(rows, vocab_size, recorded)
    return None if found is None else found[0]


def check_vocab_rows(rows: int, vocab_size: int, recorded: RecordedPadding | None = None) -> None:
    """`vocab_rows_problem` raised: StoredShapeError where the rows contradict the record
    whatever the config says, else ShapeError (the config is another model's)."""
    found = _rows_problem(rows, vocab_size, recorded)
    if found is not None:
        problem, stored = found
        raise StoredShapeError(problem) if stored else ShapeError(problem)


def _rows_problem(
    rows: int, vocab_size: int, recorded: RecordedPadding | None
) -> tuple[str, bool] | None:
    """`vocab_rows_problem`'s line, and whether the rows contradict the record itself."""
    if rows < vocab_size and recorded is not None and recorded.rows == rows:
        return (
            f"{rows} rows, fewer than the config's vocab_size {vocab_size}: the rows the run"
            f" built for its tokenizer's tokens ({recorded.source}), so every token has its"
            f" row; a config with vocab_size {rows} holds them (export-hf and training"
            f" from model.hf_config use one; model.overrides.vocab_size={rows} sets it)"
        ), False
    if recorded is not None and recorded.rows is not None and rows != recorded.rows:
        return f"{rows} rows, but {_made(recorded, vocab_size, recorded.rows)}", True
    if rows < vocab_size:
        value_head = " (a value head: validate a critic with --role critic)" if rows == 1 else ""
        return (
            f"{rows} rows{value_head}, fewer than the config's vocab_size {vocab_size}; the"
            " config belongs to another model (or the tokenizer grew): use the config the run"
            " trained with"
        ), False
    if recorded is not None:
        padded = recorded.rows_for(vocab_size)
        if rows != padded:
            return f"{rows} rows, but {_made(recorded, vocab_size, padded)}", False
        if recorded.rows is None:
            return None
    problem = _guessed_problem(rows, vocab_size)
    return None if problem is None else (problem, False)


def _made(recorded: RecordedPadding, vocab_size: int, padded: int) -> str:
    """What the run's record says it built, and so what the rows tell."""
    if recorded.rows is not None:
        return f"the run built {padded} ({recorded.source}): not the weights its record describes"
    if recorded.imported:
        return (
            f"{recorded.source}, as many as the config's vocab_size {vocab_size}; the config"
            " belongs to another model: use the config of the model imported"
        )
    made = (
        f"pads the config's vocab_size {vocab_size} to {padded} rows"
        if padded != vocab_size
        else f"leaves the config's vocab_size {vocab_size} unpadded"
    )
    return (
        f"the run's padding ({recorded.source}) {made}; the config belongs to another model"
        " (or the tokenizer grew): use the config the run trained with"
    )


def _guessed_problem(rows: int, vocab_size: int) -> str | None:
    """The guess (module docstring) for rows >= vocab_size."""
    if rows == vocab_size or padding_multiple(rows, vocab_size) is not None:
        return None
    return (
        f"{rows} rows, {rows - vocab_size} more than the config's vocab_size {vocab_size},"
        " which Megatron's vocabulary padding does not explain (vocab_size rounded up to a"
        f" multiple of d*k, d a power of two up to {MAX_POWER_OF_TWO}, k up to {MAX_FACTOR});"
        " use the config the run trained with"
    )
