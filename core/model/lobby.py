"""Connections not yet authenticated: a small budget of their own, shared fairly by
address (the ops server's lobby, and a fleet node's listener for other nodes).

A connection is in the lobby from the moment it is accepted until it is welcomed
(it proved who it is), routed elsewhere, or gone. Nothing in the lobby has shown
a token or a secret, so nothing in it may hold a place an authenticated one
needs: those have their own cap, and the lobby has its own, small one.

When the lobby is full, a newcomer is never the one refused: the address that
holds the most of the lobby gives up its oldest connection (ties: the oldest of
them all). A flood of silent sockets from one address therefore only ever pushes
out its own sockets, while a connection from anywhere else gets in at once and
keeps its place for as long as it takes to authenticate; and from one address,
the silent sockets held longest go first, so one that talks promptly gets in
past a flood that sits. Each address's cap is its fair share: all of the lobby
while nobody else waits, an equal part of it when others do.

Pure: no sockets, no clock. Whoever holds the connections closes the evicted ones.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Lobby(Generic[K]):
    """The connections not yet authenticated, by address, oldest first.

    Args:
        max_total: how many may wait at once, over every address.
    """

    def __init__(self, max_total: int) -> None:
        if max_total < 1:
            raise ValueError(f"the lobby holds at least 1 connection, not {max_total}")
        self.max_total = max_total
        self._by_address: dict[str, OrderedDict[K, int]] = {}
        self._address_of: dict[K, str] = {}
        self._ticket = itertools.count()  # arrival order, over every address

    def __len__(self) -> int:
        return len(self._address_of)

    def __contains__(self, key: object) -> bool:
        return key in self._address_of

    def waiting(self, address: str) -> int:
        """How many of `address`'s connections wait."""
        return len(self._by_address.get(address, ()))

    def admit(self, key: K, address: str) -> list[K]:
        """Let `key` in from `address`; the connections that must leave to make room
        for it (at most one: the lobby was full)."""
        if key in self._address_of:
            return []
        evicted = []
        if len(self) >= self.max_total:
            oldest = self._oldest_of_the_fullest()
            self.leave(oldest)
            evicted.append(oldest)
        self._address_of[key] = address
        self._by_address.setdefault(address, OrderedDict())[key] = next(self._ticket)
        return evicted

    def leave(self, key: K) -> bool:
        """Take `key` out (welcomed, routed or gone); False if it was not in."""
        address = self._address_of.pop(key, None)
        if address is None:
            return False
        queue = self._by_address[address]
        del queue[key]
        if not queue:
            del self._by_address[address]
        return True

    def _oldest_of_the_fullest(self) -> K:
        most = max(len(q) for q in self._by_address.values())
        firsts = (next(iter(q.items())) for q in self._by_address.values() if len(q) == most)
        key, _ = min(firsts, key=lambda item: item[1])
        return key


__all__ = ["Lobby"]
