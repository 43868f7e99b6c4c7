"""silu_kernel's Triton SiLU-times-up, run by Triton's interpreter on CPU: the kernel against
the torch op, and its check, which must pass it and catch a wrong kernel."""

import pytest

from tests.support.triton import needs_triton, run_interpreted

pytestmark = needs_triton


@pytest.fixture(scope="module")
def result() -> dict:
    return run_interpreted("tests.rollout.silu_interpreted")


def test_kernel_matches_silu_times_up(result):
    errors = result["kernel"]
    assert set(errors) == {"decode", "prefill", "odd_width", "contiguous", "transposed", "no_rows"}
    for name, error in errors.items():  # fp16 cases: within 1 ulp of fp16 at |out| < 256
        assert error <= (0.125 if name in ("odd_width", "contiguous") else 1e-4), (name, error)


def test_check_passes_the_kernel_and_catches_a_wrong_one(result):
    checks = result["self_check"]
    assert checks["torch.float32"] is None and checks["torch.float16"] is None, checks
    assert "off by" in checks["no silu"]
