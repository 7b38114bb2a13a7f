"""The lease keeper's decisions, as plain functions: no database, no clock."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from alarmtop.core.model.leases import (
    NodeRow,
    Plan,
    ShardRow,
    claimable,
    fair_share,
    live_nodes,
    moves,
    plan,
)

NOW = 1_000_000
LEASE = 10_000


def rows(owners: list[str | None], expires: int = NOW + LEASE) -> list[ShardRow]:
    return [ShardRow(i, o, 1, expires if o is not None else 0) for i, o in enumerate(owners)]


def test_live_nodes_are_those_renewed_within_a_lease_and_not_stopped() -> None:
    nodes = [NodeRow("a", None, NOW, None), NodeRow("b", None, NOW - LEASE - 1, None),
             NodeRow("c", None, NOW, NOW - 5), NodeRow("d", None, NOW - LEASE, None)]
    assert live_nodes(nodes, NOW, LEASE) == ["a", "d"]


def test_fair_share_rounds_up_and_survives_no_live_node() -> None:
    assert fair_share(64, 3) == 22
    assert fair_share(64, 0) == 64


def test_a_lone_first_node_claims_every_free_shard() -> None:
    got = plan("a", rows([None] * 8), ["a"], NOW, 8, mine=frozenset())
    assert sorted(got.claim) == list(range(8)) and got.release == []


def test_a_joining_node_takes_a_share_and_the_holder_hands_over_its_excess() -> None:
    table = rows(["a"] * 8)
    joiner = plan("b", table, ["a", "b"], NOW, 8, mine=frozenset())
    assert joiner == Plan([], [])  # nothing free yet: it waits for a's hand-over
    holder = plan("a", table, ["a", "b"], NOW, 8, mine=frozenset(range(8)))
    assert len(holder.release) == 4 and holder.claim == [] and holder.to == "b"
    after = rows(["a"] * 4 + [None] * 4)
    assert sorted(plan("b", after, ["a", "b"], NOW, 8, mine=frozenset()).claim) == [4, 5, 6, 7]


def test_a_dead_nodes_shards_are_free_once_its_lease_ran_out_or_it_is_not_live() -> None:
    table = [ShardRow(0, "a", 3, NOW + LEASE), ShardRow(1, "dead", 5, NOW - 1),
             ShardRow(2, "gone", 2, NOW + LEASE)]
    got = plan("a", table, ["a"], NOW, 3, mine=frozenset({0}))
    assert sorted(got.claim) == [1, 2]


def test_a_restarted_node_takes_back_at_once_what_the_table_gives_its_id() -> None:
    table = rows(["a", "a", "b", "b"])
    first = plan("a", table, ["a", "b"], NOW, 4, mine=frozenset(), restarted=True)
    assert sorted(first.claim) == [0, 1]
    # Later rounds count only what this very process holds: a live row naming its id
    # that it does not hold (a second process started with the same id) is left
    # alone, so two such processes never take rows from each other in turn.
    later = plan("a", table, ["a", "b"], NOW, 4, mine=frozenset({0}))
    assert later.claim == []


def test_a_node_that_holds_nothing_at_a_later_round_is_not_a_restart() -> None:
    """Holding nothing any more (another process under its id took everything) is no
    reason to take the rows naming its id: that was how two such processes took
    each other's shards at every round."""
    table = rows(["a", "a", "b", "b"])
    assert plan("a", table, ["a", "b"], NOW, 4, mine=frozenset()).claim == []


def test_step_bounds_how_many_shards_move_in_one_round() -> None:
    got = plan("a", rows([None] * 64), ["a"], NOW, 64, step=5, mine=frozenset())
    assert len(got.claim) == 5
    rel = plan("a", rows(["a"] * 64), ["a", "b"], NOW, 64, step=5, mine=frozenset(range(64)))
    assert len(rel.release) == 5


def test_nodes_claiming_at_once_try_different_shards_first() -> None:
    free = rows([None] * 64)
    a = plan("node-a", free, ["node-a", "node-b"], NOW, 64, mine=frozenset()).claim
    b = plan("node-b", free, ["node-a", "node-b"], NOW, 64, mine=frozenset()).claim
    assert len(a) == len(b) == 32
    assert len(set(a) & set(b)) < 32


def test_a_node_at_its_share_keeps_what_it_has() -> None:
    table = rows(["a"] * 3 + ["b"] * 3 + ["c"] * 2)
    assert plan("a", table, ["a", "b", "c"], NOW, 8, mine=frozenset({0, 1, 2})) == Plan([], [])


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 64), st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1,
                                    max_size=4, unique=True), st.data())
def test_rounds_converge_to_every_shard_held_within_one_of_fair(
        shards: int, live: list[str], data: st.DataObject) -> None:
    """Whatever the starting table, letting every live node play rounds in turn ends
    with every shard held by a live node and no node above its share: the fleet
    settles instead of flapping."""
    owners = [data.draw(st.sampled_from([None, "a", "b", "c", "d", "x"])) for _ in range(shards)]
    table = {i: ShardRow(i, o, 1, NOW + LEASE if o else 0) for i, o in enumerate(owners)}
    held: dict[str, set[int]] = {n: {i for i, o in enumerate(owners) if o == n} for n in live}
    for _ in range(4 * shards + 8):
        moved = False
        for me in live:
            got = plan(me, sorted(table.values()), live, NOW, shards, mine=frozenset(held[me]))
            for s in got.release:
                table[s] = ShardRow(s, None, table[s].epoch, NOW + LEASE, got.to)
                held[me].discard(s)
                moved = True
            for s in got.claim:
                row = table[s]
                if row.owner == me or claimable(row, me, set(live), NOW):
                    if row.owner in held and row.owner != me:
                        held[row.owner].discard(s)
                    table[s] = ShardRow(s, me, row.epoch + 1, NOW + LEASE)
                    held[me].add(s)
                    moved = True
        if not moved:
            break
    assert not moved, "the rounds kept moving shards"
    share = fair_share(shards, len(live))
    assert all(table[s].owner in live for s in table)
    assert all(len(h) <= share for h in held.values())
    assert sum(len(h) for h in held.values()) == shards


def test_a_shard_offered_to_one_node_is_left_to_it_until_the_offer_runs_out() -> None:
    offered = ShardRow(0, None, 4, NOW + LEASE, "b")
    assert claimable(offered, "b", {"a", "b", "c"}, NOW)
    assert not claimable(offered, "c", {"a", "b", "c"}, NOW)
    assert claimable(offered, "c", {"a", "b", "c"}, NOW + LEASE)  # b never came
    assert claimable(offered, "c", {"a", "c"}, NOW)  # b is not live
    assert claimable(ShardRow(1, None, 0, 0), "c", {"c"}, NOW)


def test_a_hand_over_gives_the_neediest_node_no_more_than_it_wants() -> None:
    table = rows(["a"] * 6 + ["b"] * 2 + ["c"] * 1)
    got = plan("a", table, ["a", "b", "c"], NOW, 9, mine=frozenset(range(6)))
    assert got.to == "c" and len(got.release) == 2


def test_a_shard_held_under_a_new_epoch_after_a_round_is_lost_and_gained() -> None:
    """Claimed back after another node held it (the node never saw its lease lapse):
    what the node remembered of its objects is from before the other's writes."""
    gained, lost = moves({1: 5, 2: 7, 3: 2}, set(), {1: 5, 2: 9, 4: 1})
    assert gained == {2, 4} and lost == {2, 3}


def test_a_lapsed_shard_renewed_is_only_gained_its_loss_was_told_at_the_lapse() -> None:
    assert moves({1: 5, 2: 7}, {2}, {1: 5, 2: 7}) == ({2}, set())
    assert moves({1: 5, 2: 7}, {2}, {1: 5, 2: 8}) == ({2}, set())
    assert moves({1: 5, 2: 7}, {2}, {1: 5}) == (set(), set())
    assert moves({1: 5}, set(), {1: 5}) == (set(), set())
