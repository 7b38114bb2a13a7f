"""Who holds which shard: the pure decisions of a node's lease keeper.

Every `lease_s / 3` a node renews the leases it holds, learns which nodes are
alive (renewed within a lease), and moves toward its fair share: it claims free or
expired shards while it holds fewer than `ceil(shards / live)`, and hands over the
ones it holds above that share when some live node holds fewer than its own share
(so a node that joins takes its part; a node that stops hands over at once; a node
that dies loses its shards when their leases run out).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple


class ShardRow(NamedTuple):
    shard: int
    owner: str | None
    epoch: int
    expires_ms: int


class NodeRow(NamedTuple):
    node_id: str
    address: str | None
    renewed_ms: int
    stopped_ms: int | None


class Plan(NamedTuple):
    claim: list[int]  # free or expired shards to take
    release: list[int]  # held shards to hand over


def live_nodes(nodes: Iterable[NodeRow], now_ms: int, lease_ms: int) -> list[str]:
    """Nodes that renewed within a lease and did not stop."""
    return sorted(n.node_id for n in nodes
                  if n.stopped_ms is None and n.renewed_ms >= now_ms - lease_ms)


def fair_share(shards: int, live: int) -> int:
    return math.ceil(shards / max(1, live))


def plan(me: str, rows: Sequence[ShardRow], live: Sequence[str], now_ms: int,
         shards: int, step: int | None = None, mine: frozenset[int] | None = None) -> Plan:
    """What `me` claims and releases this round.

    `mine` are the shards this very process holds (with their epochs). At a node's
    first round (`mine` empty), a shard the table gives to `me` was an earlier run's
    of the same node (restarted before its leases ran out): free to take at once,
    with a new epoch that fences the earlier run out. `step` bounds how many shards
    move in one round (a node joining a big fleet takes its share over a few rounds)."""
    live_set = set(live) | {me}
    share = fair_share(shards, len(live_set))

    def held_here(r: ShardRow) -> bool:
        return r.owner == me and r.expires_ms > now_ms and (mine is None or r.shard in mine)

    held = [r.shard for r in rows if held_here(r)]
    restarted = mine is not None and not mine
    free = [r.shard for r in rows if not held_here(r) and (
        r.owner is None or r.expires_ms <= now_ms or r.owner not in live_set
        or (r.owner == me and restarted))]
    limit = step if step is not None else shards
    if len(held) < share:
        want = min(share - len(held), limit)
        return Plan(_spread(free, want, me), [])
    if len(held) > share:
        others = {n: 0 for n in live_set if n != me}
        for r in rows:
            if r.owner in others and r.expires_ms > now_ms:
                others[r.owner] += 1
        floor_share = shards // max(1, len(live_set))
        if any(count < floor_share for count in others.values()):
            excess = min(len(held) - share, limit)
            return Plan([], sorted(held)[-excess:])
    return Plan([], [])


def _spread(free: Sequence[int], want: int, me: str) -> list[int]:
    """Which of the free shards to try first: an order of our own, so that nodes
    claiming at the same moment mostly try different shards."""
    if want <= 0:
        return []
    seed = sum(me.encode())
    return sorted(free, key=lambda s: (s * 2654435761 + seed) % 4294967296)[:want]
