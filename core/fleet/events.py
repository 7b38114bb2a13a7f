"""The fleet's events, seen from any node: each node keeps its recent events while
someone watches, and a watching node pulls the others' over the node links.

Nothing is kept while nobody watches: the ring listens to the node's bus only
from the first pull until `IDLE_S` after the last, so a fleet without consoles
pays nothing on its hot paths. A pulled event carries `data["node"]`, the node
it happened on; events of the watching node itself carry none. The feed is for
eyes, not for bookkeeping: a node that falls behind by more than the ring holds
(`RING`) is told how many it missed, as a slow subscriber is.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from alarmtop.core.kernel.events import Event, EventBus
from alarmtop.core.kernel.supervisor import Supervisor

RING = 20_000
IDLE_S = 30.0  # the ring stops listening this long after its last pull
PULL_S = 0.25
PULL_LIMIT = 5_000
log = logging.getLogger("alarmtop.fleet")


class EventRing:
    """This node's recent events, numbered, for other nodes to pull."""

    def __init__(self, bus: EventBus, now: Callable[[], float], size: int = RING) -> None:
        self._bus = bus
        self._now = now
        self._ring: collections.deque[tuple[int, Event]] = collections.deque(maxlen=size)
        self._seq = 0
        self._unlisten: Callable[[], None] | None = None
        self._last_pull = 0.0

    def _record(self, event: Event) -> None:
        if event.data.get("node") is not None:
            return  # pulled from another node: its own ring has it
        self._seq += 1
        self._ring.append((self._seq, event))

    @property
    def watched(self) -> bool:
        """Whether the ring listens (someone pulled within `IDLE_S`)."""
        return self._unlisten is not None

    def pull(self, after: int, limit: int = PULL_LIMIT) -> dict[str, Any]:
        """Events numbered after `after` (at most `limit`), the last number, and how
        many the puller missed because the ring moved past them."""
        self._last_pull = self._now()
        if self._unlisten is None:
            self._unlisten = self._bus.listen(self._record)
            return {"events": [], "last": self._seq, "missed": 0}
        if after > self._seq:
            after = 0  # this node restarted: its numbers began again
        first = self._ring[0][0] if self._ring else self._seq + 1
        missed = max(0, first - after - 1) if after else 0
        start = max(0, after - first + 1)
        out = list(itertools.islice(self._ring, start, start + limit))
        last = out[-1][0] if out else self._seq
        return {"events": [e.to_dict() for _, e in out], "last": last, "missed": missed}

    def idle_check(self) -> None:
        """Stop listening when nobody pulled for `IDLE_S`."""
        if self._unlisten is not None and self._now() - self._last_pull > IDLE_S:
            self._unlisten()
            self._unlisten = None
            self._ring.clear()


Peers = Callable[[], Awaitable[list[tuple[str, str]]]]  # (node id, address) of live others
Ask = Callable[[str, str, dict[str, Any]], Awaitable[Any]]  # (address, op, fields)


STOP_GRACE_S = 5.0  # a pull that ignores its cancel is left behind (logged), not waited for


class FleetEvents:
    """Pulls the other nodes' events while started; `drain()` hands them over."""

    def __init__(self, peers: Peers, ask: Ask) -> None:
        self._peers = peers
        self._ask = ask
        self._after: dict[str, int] = {}
        self._got: list[Event] = []
        self.missed = 0
        self._tasks = Supervisor(None, "fleet events")  # the puller, while it runs
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._tasks.reopen()
            self._task = self._tasks.spawn(self._run(), name="fleet-events")

    async def stop(self) -> None:
        if self._task is not None:
            self._task = None
            await self._tasks.close(grace_s=STOP_GRACE_S)

    def drain(self) -> list[Event]:
        got, self._got = self._got, []
        return got

    async def _run(self) -> None:
        while True:
            try:
                await self.pull_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the next round tries again
                log.debug("fleet events not pulled: %s", exc)
            await asyncio.sleep(PULL_S)

    async def pull_once(self) -> None:
        peers = await self._peers()
        live = {node for node, _ in peers}
        for node in [n for n in self._after if n not in live]:
            del self._after[node]
        for node, address in peers:
            try:
                reply = await self._ask(address, "events",
                                        {"after": self._after.get(node, 0)})
            except Exception as exc:
                log.debug("events of node %s not pulled: %s", node, exc)
                continue
            self._after[node] = int(reply["last"])
            self.missed += int(reply.get("missed") or 0)
            for raw in reply["events"]:
                self._got.append(Event(raw["type"], int(raw["at_ms"]),
                                       {**raw["data"], "node": node}))
