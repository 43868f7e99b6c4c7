"""A failed save's line carries why it failed where the library puts that below a heading.

Was: `saving step 3 failed: StrictDataclassClassValidationError: Class validation error
for validator 'validate_layer_type': ...`: huggingface_hub's validation errors say on their
first line only which validator failed, and the `...` dropped the reason below it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import Qwen2Config

from mfsdp_ckpt.checkpoint_failures import CheckpointSaveError, save_failure


def _validation_error() -> Exception:
    """What transformers' validation, which its save runs, raises for a Qwen2 config whose
    layer count was set after it derived `layer_types` (as overrides once were)."""
    config = Qwen2Config(num_hidden_layers=2)
    config.num_hidden_layers = 1
    with pytest.raises(Exception) as raised:
        config.validate()
    return raised.value


def test_the_reason_below_the_heading_is_in_the_line():
    failure = save_failure(_validation_error(), Path("run/global_step_3.tmp"), 3)
    assert isinstance(failure, CheckpointSaveError)
    line = str(failure)
    assert line.startswith(
        "run/global_step_3.tmp: saving step 3 failed: StrictDataclassClassValidationError:"
        " Class validation error for validator 'validate_layer_type': ValueError:"
        " `num_hidden_layers` (1) must be equal to the number of `layer_types` (2)"
    ), line
    assert "\n" not in line and not line.endswith("..."), line


def test_a_first_line_that_says_why_is_kept_alone():
    failure = save_failure(ValueError("disk says no\ntraceback text"), Path("r/s.tmp"), 1)
    assert str(failure) == "r/s.tmp: saving step 1 failed: ValueError: disk says no ..."


def test_lines_after_the_reason_stay_out_and_the_line_is_bounded():
    said = "Checks failed:\n  " + "x" * 5000 + "\nmore\n"
    line = str(save_failure(ValueError(said), Path("r/s.tmp"), 1))
    assert line.startswith("r/s.tmp: saving step 1 failed: ValueError: Checks failed: xxx")
    assert "more" not in line and "\n" not in line and len(line) < 400, line
