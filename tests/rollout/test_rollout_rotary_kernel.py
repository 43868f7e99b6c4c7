"""rotary_kernel's Triton rotary-and-cache-writes, run by Triton's interpreter on CPU: the
kernel against decode_ops.rotary_store, and its check, which must pass it and catch wrong
kernels."""

import pytest

from tests.support.triton import needs_triton, run_interpreted

pytestmark = needs_triton


@pytest.fixture(scope="module")
def result() -> dict:
    return run_interpreted("tests.rollout.rotary_interpreted")


def test_kernel_matches_rotary_store(result):
    errors = result["kernel"]
    assert set(errors) == {
        "grouped_views",
        "odd_half",
        "own_tensors",
        "no_groups",
        "no_rows",
        "sin_broadcast",
    }
    for name, error in errors.items():  # fp32: the same products and sums
        assert error <= 1e-5, (name, error)


def test_check_passes_the_kernel_and_catches_wrong_ones(result):
    checks = result["self_check"]
    assert checks["torch.float32"] is None and checks["torch.float16"] is None, checks
    assert checks["next slot"].startswith("keys off by"), checks
    assert checks["unrotated"].startswith("q off by"), checks
