"""The model the GPU rollout tests share (test_rollout_flash_gpu.py, test_rollout_hf_gpu.py):
the tiny model with perturbed weights, on CUDA, built once per test module. A module that
defines its own `model` fixture uses that one."""

import pytest

from tests.support.rollout import tiny_perturbed_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_perturbed_model(tmp_path_factory, 0, "cuda")
