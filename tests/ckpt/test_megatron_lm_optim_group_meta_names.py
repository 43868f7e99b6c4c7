"""The Megatron-LM-shaped fixture records each parameter's optimizer group under the name
Megatron-LM gives it: a SwiGLU fc1's states are split into `weight_w` / `weight_v` on save,
its `param_to_group_meta` record is the unsplit `linear_fc1.weight`'s, one for both halves
(as tests/support/megatron_checkpoints.adam_state writes it). The fixture wrote the split
names, so what reads the records was tested against names no real checkpoint holds."""

from tests.support.interop_layouts import maker


def test_group_meta_names_the_unsplit_fc1_once():
    module = maker()
    optimizer = module.state_dict(module.CONFIG)["optimizer"]
    states, records = set(optimizer["state"]), set(optimizer["param_to_group_meta"])
    fc1 = "module.module.module.decoder.layers.0.mlp.linear_fc1.weight"
    assert {f"{fc1}_w", f"{fc1}_v"} <= states and fc1 not in states
    assert fc1 in records and not records & {f"{fc1}_w", f"{fc1}_v"}
    merged = {name.removesuffix("_w").removesuffix("_v") for name in states}
    assert records == merged
