"""`strategy.bucket_size` reaches Megatron-FSDP's DistributedDataParallelConfig, and only
while `fully_shard_model` runs (megatron-fsdp imports on CPU; it runs only on CUDA)."""

from __future__ import annotations

import importlib

from trainer.strategies.megatron_fsdp import _default_bucket_size


def test_bucket_size_applies_inside_and_is_restored_after():
    module = importlib.import_module("megatron_fsdp.fully_shard")
    original = module.DistributedDataParallelConfig
    with _default_bucket_size(50_000_000):
        assert module.DistributedDataParallelConfig().bucket_size == 50_000_000
        assert module.DistributedDataParallelConfig(bucket_size=7).bucket_size == 7
    assert module.DistributedDataParallelConfig is original
    assert module.DistributedDataParallelConfig().bucket_size is None


def test_no_bucket_size_leaves_the_default():
    module = importlib.import_module("megatron_fsdp.fully_shard")
    original = module.DistributedDataParallelConfig
    with _default_bucket_size(None):
        assert module.DistributedDataParallelConfig is original
