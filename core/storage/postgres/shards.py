"""Where an object's rows live in a fleet: its shard, and the slot of the counters a
node adds to. Stable hashes, the same on every node and every start."""

from __future__ import annotations

import hashlib

ObjectKey = tuple[str, str]


def shard_of(key: ObjectKey, shards: int) -> int:
    """The shard of an object: a stable hash of its class and name."""
    digest = hashlib.blake2b(f"{key[0]}\x00{key[1]}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def counter_slot(node_id: str) -> int:
    """The slot of the counters a node adds to: a stable hash of its id, below 1,024 so
    the table stays small however many nodes have come and gone (two nodes that share
    a slot only wait for each other's commits on it)."""
    digest = hashlib.blake2b(node_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 1024
