"""The ops server's lobby: connections not yet welcomed (no token shown yet).

The policy (a budget of their own, shared fairly by address; a newcomer is never
the one refused) is `alarmtop.core.model.lobby.Lobby`, shared with a fleet node's
listener; this adds what the ops server tells a connection it evicts.

Pure: no sockets, no clock. The server applies the evictions (`admission`).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

from alarmtop.core.model.lobby import Lobby as FairLobby
from alarmtop.server.guard import CLOSE_TRY_AGAIN, Refusal

K = TypeVar("K", bound=Hashable)

FULL = Refusal(CLOSE_TRY_AGAIN, "server full for unauthenticated connections; retry")


class Lobby(FairLobby[K]):
    """The connections not yet welcomed, by address, oldest first.

    Args:
        max_total: how many may wait at once, over every address.
    """

    def enter(self, key: K, address: str) -> list[tuple[K, Refusal]]:
        """Let `key` in from `address`; the connections that must leave to make room
        for it, each with what to tell it (at most one: the lobby was full)."""
        return [(evicted, FULL) for evicted in self.admit(key, address)]


__all__ = ["FULL", "Lobby"]
