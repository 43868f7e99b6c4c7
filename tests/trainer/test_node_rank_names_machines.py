"""A line about machines of a `--nnodes` run names each by the `--node-rank` the user
launched it with and its host: torchrun's c10d rendezvous numbers machines as they join, so
"rank(s) 2-3" named no machine the user could find."""

from trainer.node_rank import NODE_RANK, given_node_rank, machine_names, pass_node_rank


def test_one_machine_is_named_by_its_node_rank_and_host():
    machines = [(1, "h2"), (1, "h2"), (0, "h1"), (0, "h1")]
    assert machine_names([0, 1], machines) == "machine --node-rank 1 (host h2)"
    assert machine_names([3], machines) == "machine --node-rank 0 (host h1)"


def test_several_machines_are_named_in_the_order_of_their_ranks():
    machines = [(2, "h3"), (0, "h1"), (1, "h2")]
    assert (
        machine_names([0, 1], machines)
        == "machines --node-rank 2 (host h3), --node-rank 0 (host h1)"
    )


def test_a_machine_without_a_node_rank_is_named_by_host_and_ranks():
    machines = [(None, "h1"), (None, "h1"), (None, "h2"), (None, "h2")]
    assert machine_names([2, 3], machines) == "machine on host h2 (rank(s) 2-3)"


def test_the_launcher_hands_the_node_rank_given_and_clears_a_stale_one(monkeypatch):
    monkeypatch.setenv(NODE_RANK, "5")  # exported in a shell, or left by another run
    pass_node_rank(None)
    assert given_node_rank() is None
    pass_node_rank(3)
    assert given_node_rank() == 3
    monkeypatch.setenv(NODE_RANK, "x")
    assert given_node_rank() is None
