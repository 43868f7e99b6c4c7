"""bench/sft_throughput.py's lever sets: every set runs on every strategy, a Megatron-FSDP-only
lever is refused when it would have no FSDP2 twin, and liger's process-wide patches run last."""

from __future__ import annotations

import pytest

from bench.sft_throughput import parse_variant, schedule


def test_levers_set_the_variant_fields():
    variant = parse_variant("megatron_fsdp", "liger+flce+compile+packed+varlen", twins=True)
    assert (variant.loss, variant.liger, variant.compile, variant.data, variant.varlen) == (
        "liger",
        True,
        True,
        "packed",
        True,
    )
    assert parse_variant("fsdp2", "chunked", twins=True).loss == "chunked"


def test_megatron_only_lever_needs_megatron_alone():
    with pytest.raises(SystemExit, match="no FSDP2 twin"):
        parse_variant("megatron_fsdp", "chunked+bucket=50000000", twins=True)
    assert (
        parse_variant("megatron_fsdp", "chunked+bucket=50000000", twins=False).bucket == 50_000_000
    )
    with pytest.raises(SystemExit, match="unknown lever"):
        parse_variant("fsdp2", "chunked+turbo", twins=True)


def test_liger_variants_run_after_every_other_round():
    variants = [
        parse_variant(s, levers, twins=True)
        for levers in ("plain", "liger+flce", "chunked")
        for s in ("fsdp2", "megatron_fsdp")
    ]
    order = [v.spec for v in schedule(variants, repeat=2)]
    first_liger = min(i for i, spec in enumerate(order) if "liger" in spec)
    assert all("liger" not in spec for spec in order[:first_liger])
    assert all("liger" in spec for spec in order[first_liger:])
    assert len(order) == 12 and order.count("megatron_fsdp:liger+flce") == 2
