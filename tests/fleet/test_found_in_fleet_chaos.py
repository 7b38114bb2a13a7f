"""Faults the chaos harness found on a fleet (`python -m tests.chaos.harness
--backend postgres`), each kept as a test.

- A node that gained shards counted every attempt it had in flight on the shards it
  kept as crashed (its recovery of the gained shards' attempts took all 'running'
  rows it holds): a handler that succeeded was retried, and one that outlived a few
  such gains ended as a dead letter, "the runtime stopped while the handler ran",
  on a node that never stopped.
- A node restarting listens for other nodes' calls before it runs events: a call
  forwarded to it then failed with RuntimeNotRunning instead of waiting for it.
- A node restarting failed to start when a shard it was recovering cut attempts of
  went to another node meanwhile (LeaseLost out of start()).
- A call sent on a connection to a peer that had just died (before the reader saw
  it close) failed with websockets' ConnectionClosedError, which the router does not
  retry, instead of PeerDown (nothing was sent: ask the shard's next owner).
- An attempt whose shard was handed over between its start (its row 'running') and
  its handler was left running: the next owner counted it as crashed and retried
  it, though no handler had run.
- A call to a peer killed just after it accepted the connection's handshake failed
  on the hello with the raw ConnectionClosedError too.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, Runtime, VirtualClock
from alarmtop.core.fleet.links import NodeClient
from alarmtop.core.model.alarm_policy import AlarmState
from alarmtop.core.model.errors import LeaseLost, PeerDown
from tests.fleet.conftest import SHARDS, NodeFactory, backend_of, balance, name_on, until


class Held(DurableObject):
    """An alarm handler that runs until the test lets it end."""

    entered: asyncio.Event
    release: asyncio.Event
    runs: list[int]

    async def arm(self, delay_ms: int) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms() + delay_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        Held.runs.append(info.retry_count)
        Held.entered.set()
        await Held.release.wait()
        await self.ctx.storage.put("done", True)

    async def add(self, n: int) -> int:
        value = int(await self.ctx.storage.get("n") or 0) + n
        await self.ctx.storage.put("n", value)
        return value


def _reset() -> None:
    Held.entered, Held.release, Held.runs = asyncio.Event(), asyncio.Event(), []


async def test_gaining_shards_does_not_cut_the_attempts_in_flight(
        node: NodeFactory, clock: VirtualClock) -> None:
    _reset()
    a = await node("a", Held)
    b = await node("b", Held)
    await balance(a, b)
    name = name_on(a, "Held")
    before = set(backend_of(a).epochs)
    await a.get("Held", name).arm(1_000)
    # advance() waits for the handler, which waits for the test: run it alongside.
    advancing = asyncio.ensure_future(clock.advance(2))
    await asyncio.wait_for(Held.entered.wait(), 10)
    await b.stop()  # its shards go to a, which recovers their cut attempts
    await balance(a)
    assert set(backend_of(a).epochs) > before
    await asyncio.sleep(0.2)  # the gain's recovery runs meanwhile (a spawned task)
    status = await a.alarm("Held", name)
    assert status is not None and status.state == "running" and status.retry_count == 0, status
    Held.release.set()
    await asyncio.wait_for(advancing, 10)
    await until(lambda: _gone(a, name), what="the attempt ended")
    assert Held.runs == [0]  # it ran once, and was never counted as crashed


async def _gone(rt: Runtime, name: str) -> bool:
    return await rt.alarm("Held", name) is None


async def test_a_call_to_a_node_not_yet_running_waits_for_it(node: NodeFactory) -> None:
    _reset()
    a = await node("a", Held)
    b = await node("b", Held)
    await balance(a, b)
    name = name_on(b, "Held")
    b._state.running = False  # as between listening and running, while b starts
    call = asyncio.ensure_future(a.get("Held", name).add(1))
    await asyncio.sleep(0.3)
    assert not call.done()  # nothing ran on b; a asks again
    b._state.running = True
    assert await asyncio.wait_for(call, 10) == 1


async def test_a_call_on_a_connection_the_peer_closed_is_peer_down(node: NodeFactory) -> None:
    _reset()
    a = await node("a", Held)
    address = backend_of(a).address
    assert address is not None
    client = NodeClient(address, "b", backend_of(a).cluster_secret)
    try:
        name = name_on(a, "Held")
        assert await client.request("call", timeout_s=5, cls="Held", name=name, method="add",
                                    args=[1], kwargs={}) == 1
        conn = client._conn
        await conn.close()
        client._conn = conn  # closed, and its reader has not noticed yet
        with pytest.raises(PeerDown):
            await client.request("call", timeout_s=5, cls="Held", name=name, method="add",
                                 args=[1], kwargs={})
    finally:
        await client.close()


async def test_an_attempt_that_ends_during_the_recovery_of_a_gain_is_left_alone(
        node: NodeFactory, clock: VirtualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recovery reads the 'running' rows, then recovers them one by one: an attempt
    of this node that ends in between left a stale row in what was read."""
    _reset()
    a = await node("a", Held)
    name = name_on(a, "Held")
    await a.get("Held", name).arm(1_000)
    advancing = asyncio.ensure_future(clock.advance(2))
    await asyncio.wait_for(Held.entered.wait(), 10)
    alarm_rows = a.scheduler.rows
    read = alarm_rows.in_state

    async def read_then_end(*args: object, **kwargs: object) -> object:
        rows = await read(*args, **kwargs)  # type: ignore[arg-type]
        Held.release.set()  # the attempt ends after the read
        await until(lambda: _gone(a, name), what="the attempt ended")
        return rows

    monkeypatch.setattr(alarm_rows, "in_state", read_then_end)
    await a.scheduler.reload()  # what gaining a shard runs
    monkeypatch.undo()
    await asyncio.wait_for(advancing, 10)
    await clock.advance(300)  # time for any retry it was given
    assert Held.runs == [0] and await _gone(a, name)


async def test_a_shard_lost_during_the_recovery_of_cut_attempts_is_left_to_its_owner(
        node: NodeFactory, clock: VirtualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restarting node recovers the attempts its last run left 'running'; another node
    may claim one of those shards meanwhile. Its recovery is then the new owner's:
    start() (and a gain's reload) carry on instead of failing."""
    a = await node("a", Held)
    name = name_on(a, "Held")
    await a.get("Held", name).arm(3_600_000)  # nothing falls due meanwhile
    db, rows = a.backend.database, a.backend.alarm_rows
    armed = await rows.get(("Held", name))
    assert armed is not None
    # The row as its last run left it, dead mid-attempt (no handler of it runs here).
    await db.write([armed._replace(state=AlarmState.RUNNING, started_ms=clock.now_ms())])
    backend = backend_of(a)

    async def moved(conn: object, shards: set[int], at: dict[int, int] | None) -> None:
        raise LeaseLost("the shard went to another node")

    def not_held(shards: set[int], at: dict[int, int] | None
                 ) -> tuple[list[int], list[int], str]:
        return sorted(shards), [-1] * len(shards), backend.node_id

    # Refused both ways a write is fenced: in a transaction, and inside one statement.
    monkeypatch.setattr(backend.database, "fence", moved)
    monkeypatch.setattr(backend.database, "fence_rows", not_held)
    await asyncio.wait_for(a.scheduler.reload(), 10)  # no LeaseLost out of it
    monkeypatch.undo()
    left = await rows.get(("Held", name))
    assert left is not None and left.state is AlarmState.RUNNING  # left to its new owner


async def test_an_attempt_started_as_its_shard_is_handed_over_is_not_counted(
        node: NodeFactory, clock: VirtualClock) -> None:
    """A clean hand-over that begins between an attempt's start (its row says
    'running') and its handler: no handler runs here, and the row goes back to how it
    was, so the next owner runs it as the first attempt instead of counting the cut one
    as crashed (a retry, on the way to a dead letter, for nothing that ran)."""
    _reset()
    Held.release.set()
    a = await node("a", Held)
    b = await node("b", Held)
    await balance(a, b)
    name = name_on(b, "Held")
    await a.get("Held", name).arm(1_000)
    backend = backend_of(b)
    shard = backend.shard_of(("Held", name))
    real, looks = b.host.may_run, []

    def may_run(key: tuple[str, str]) -> bool:
        # The dispatcher looks before the attempt's start, the host before the handler:
        # the hand-over begins in between.
        if key == ("Held", name):
            looks.append(key)
            if len(looks) == 2:
                backend.leaving.add(shard)
        return bool(real(key)) if real is not None else True
    b.host.may_run = may_run
    await clock.advance(2)

    async def withdrawn() -> bool:
        status = await b.alarm("Held", name)
        return status is not None and status.state == "pending"
    await until(withdrawn, what="the attempt withdrawn")
    assert Held.runs == []
    status = await b.alarm("Held", name)
    assert status is not None and status.retry_count == 0 and status.attempt_count == 0
    backend.leaving.discard(shard)
    await b.stop()  # the rest of the hand-over: its shards go to a
    await balance(a)
    assert shard in backend_of(a).epochs
    await clock.advance(1)
    await until(lambda: _gone(a, name), what="the alarm ran on its new owner")
    assert Held.runs == [0]  # once, as the first attempt


async def held_on_b(node: NodeFactory, clock: VirtualClock
                    ) -> tuple[Runtime, Runtime, str, asyncio.Future[None]]:
    """Nodes a and b, and an alarm of an object on b's shards running its handler there
    until the test releases it (advance() waits for the handler: it runs alongside)."""
    _reset()
    a = await node("a", Held)
    b = await node("b", Held)
    await balance(a, b)
    name = name_on(b, "Held")
    await a.get("Held", name).arm(1_000)
    advancing = asyncio.ensure_future(clock.advance(2))
    await asyncio.wait_for(Held.entered.wait(), 10)
    return a, b, name, advancing


async def test_a_clean_stop_lets_the_attempts_in_flight_end_before_handing_over(
        node: NodeFactory, clock: VirtualClock) -> None:
    """A node that stops cleanly starts no new attempt, lets the one in flight end,
    then hands its shards over: the attempt is not cut off, and its next owner does not
    run it again as a crashed one."""
    a, b, name, advancing = await held_on_b(node, clock)
    stopping = asyncio.ensure_future(b.stop())
    await asyncio.sleep(0.3)
    assert not stopping.done()  # waiting for the handler, not cutting it off
    Held.release.set()
    await asyncio.wait_for(stopping, 10)
    await asyncio.wait_for(advancing, 10)
    await balance(a)
    await until(lambda: _gone(a, name), what="the alarm done")
    assert Held.runs == [0]  # once: it ended on b, and a never ran it again
    assert await a.get("Held", name).add(0) == 0  # the object answers on its new owner
    assert b.abandoned == []


async def test_a_peer_that_dies_right_after_the_handshake_is_peer_down(
        node: NodeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection to a peer killed just after it accepted the handshake fails on
    the first frame (the hello): that is PeerDown (nothing of the call was sent), not
    websockets' raw ConnectionClosedError, which the router does not retry."""
    import websockets.asyncio.client as ws_client
    _reset()
    a = await node("a", Held)
    address = backend_of(a).address
    assert address is not None
    real = ws_client.connect

    async def dies_after_handshake(*args: Any, **kwargs: Any) -> Any:
        conn = await real(*args, **kwargs)
        conn.transport.abort()  # as a SIGKILL of the peer leaves it: no close frame
        return conn
    monkeypatch.setattr(ws_client, "connect", dies_after_handshake)
    client = NodeClient(address, "b", backend_of(a).cluster_secret)
    try:
        with pytest.raises(PeerDown, match="went away as it was reached"):
            await client.request("call", timeout_s=5, cls="Held", name=name_on(a, "Held"),
                                 method="add", args=[1], kwargs={})
    finally:
        await client.close()


async def test_a_stop_with_a_stuck_handler_still_hands_its_shards_over_in_its_grace(
        node: NodeFactory, clock: VirtualClock) -> None:
    """The drain takes at most half the stop's grace: a handler that outlives it is
    cut off as before, and the shards are still handed over, at once, within the grace
    (`alarmtop serve` stops its runtime with a grace of 1 s)."""
    a, b, _, advancing = await held_on_b(node, clock)
    try:
        await asyncio.wait_for(b.stop(1.0), 3)
        assert "storage" not in b.abandoned, b.abandoned  # the hand-over ran in the grace
        await backend_of(a).keep_leases_once()  # offered to a: no lease to wait out
        assert len(backend_of(a).epochs) == SHARDS
    finally:
        Held.release.set()
        await asyncio.wait_for(advancing, 10)
