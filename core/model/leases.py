"""Who holds which shard: the pure decisions of a node's lease keeper.

Every `lease_s / 3` a node renews the leases it holds, learns which nodes are
alive (renewed within a lease), and moves toward its fair share: it claims free or
expired shards while it holds fewer than `ceil(shards / live)`, and hands over the
ones it holds above that share when some live node holds fewer than the share
(so a node that joins takes its part; a node that stops hands over at once; a node
that dies loses its shards when their leases run out).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import NamedTuple


class ShardRow(NamedTuple):
    shard: int
    owner: str | None
    epoch: int
    expires_ms: int  # the lease's end; of a shard being handed over, the offer's end
    offered_to: str | None = None


class NodeRow(NamedTuple):
    node_id: str
    address: str | None
    renewed_ms: int
    stopped_ms: int | None


class Plan(NamedTuple):
    claim: list[int]  # free or expired shards to take
    release: list[int]  # held shards to hand over
    to: str | None = None  # the node they are offered to (the one furthest below share)


def live_nodes(nodes: Iterable[NodeRow], now_ms: int, lease_ms: int) -> list[str]:
    """Nodes that renewed within a lease and did not stop."""
    return sorted(n.node_id for n in nodes
                  if n.stopped_ms is None and n.renewed_ms >= now_ms - lease_ms)


def moves(before: Mapping[int, int], lapsed: AbstractSet[int], after: Mapping[int, int]
          ) -> tuple[set[int], set[int]]:
    """The shards a node gained and lost when it holds `after` (shard: epoch) where it
    held `before`, of which it ran all but the `lapsed` ones (their loss was told when
    they lapsed). A shard held under another epoch after than before was claimed by
    another node (or an earlier run of this one) in between, which may have run its
    objects' events: it is lost and gained again, so that nothing this node remembers
    of those objects from before is used."""
    running = {s: e for s, e in before.items() if s not in lapsed}
    moved = {s for s, e in running.items() if s in after and after[s] != e}
    return (set(after) - set(running)) | moved, (set(running) - set(after)) | moved


def fair_share(shards: int, live: int) -> int:
    return math.ceil(shards / max(1, live))


def plan(me: str, rows: Sequence[ShardRow], live: Sequence[str], now_ms: int,
         shards: int, step: int | None = None, mine: frozenset[int] | None = None,
         restarted: bool = False) -> Plan:
    """What `me` claims and releases this round.

    `mine` are the shards this very process holds (with their epochs). At a node's
    first round (`restarted`), a shard the table gives to `me` was an earlier run's
    of the same node (restarted before its leases ran out): free to take at once,
    with a new epoch that fences the earlier run out. At a later round, one that
    holds nothing (`mine` empty) is not a restart: the rows naming `me` are another
    process's, left alone. `step` bounds how many shards move in one round (a node
    joining a big fleet takes its share over a few rounds)."""
    live_set = set(live) | {me}
    share = fair_share(shards, len(live_set))

    def held_here(r: ShardRow) -> bool:
        return r.owner == me and r.expires_ms > now_ms and (mine is None or r.shard in mine)

    held = [r.shard for r in rows if held_here(r)]
    free = [r.shard for r in rows if not held_here(r) and claimable(r, me, live_set, now_ms,
                                                                     restarted)]
    limit = step if step is not None else shards
    if len(held) < share:
        want = min(share - len(held), limit)
        # Shards handed to this node first: their giver counted on it taking them.
        offered = [r.shard for r in rows if r.owner is None and r.offered_to == me
                   and r.expires_ms > now_ms]
        rest = [f for f in free if f not in set(offered)]
        return Plan((offered + _spread(rest, want, me))[:want], [])
    if len(held) > share:
        # What each other node holds, counting the shards on their way to it.
        others = {n: 0 for n in live_set if n != me}
        for r in rows:
            if r.expires_ms <= now_ms:
                continue
            if r.owner in others:
                others[r.owner] += 1
            elif r.owner is None and r.offered_to in others:
                others[r.offered_to] += 1
        # Some other live node is below the share whenever this one is above it (the
        # shards add up); handing over only then moves shards to a node that wants them.
        below = sorted((count, node) for node, count in others.items() if count < share)
        if below:
            excess = min(len(held) - share, limit, share - below[0][0])
            return Plan([], sorted(held)[-excess:], below[0][1])
    return Plan([], [])


def claimable(r: ShardRow, me: str, live: set[str] | frozenset[str], now_ms: int,
              restarted: bool = False) -> bool:
    """Whether `me` may take shard `r` (the same rule as the claim's SQL): nobody
    holds it (and it is not being handed to another live node), its lease ran out,
    its owner is not live, or it is this very node's from before a restart."""
    if r.owner is None:
        return r.offered_to is None or r.offered_to == me or r.expires_ms <= now_ms \
            or r.offered_to not in live
    return r.expires_ms <= now_ms or r.owner not in live or (r.owner == me and restarted)


def _spread(free: Sequence[int], want: int, me: str) -> list[int]:
    """Which of the free shards to try first: an order of our own, so that nodes
    claiming at the same moment mostly try different shards."""
    if want <= 0:
        return []
    # A hash of (node, shard): a seed added to one multiplier would shift every key
    # by the same amount and leave every node with the same order.
    return sorted(free, key=lambda s: hashlib.blake2b(f"{me}\x00{s}".encode(),
                                                      digest_size=8).digest())[:want]
