"""The cursor holds its object while rows vanish, come back and re-sort, and a key acts on
exactly the row highlighted when it was pressed: Pilot against a real server.

In the demo an alarm's row is missing from a refresh for a moment while it fires and
re-arms. The cursor took the object for gone, jumped, and from then on kept a screen
line instead of an object; with --no-confirm, `n` on ClickCounter/signup fired
ClickCounter/docs. Here `Blinker` objects arm, disarm and re-arm their alarms under a
held cursor, their rows re-sort, and `n` is pressed in between: each press must
reach the server for the object under the cursor (its audit row names it), whether
that row is listed at that moment or held in sight while missing. An object that
truly leaves is said once on the status line. The runtime's clock is virtual; the
waits are for the console's refreshes (see `until`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from textual.message import Message

from alarmtop.core import AlarmInfo, DurableObject, VirtualClock
from alarmtop.server.app import OpsServer
from alarmtop.server.auth import Tokens
from alarmtop.tui.app import AlarmtopApp
from alarmtop.tui.client import WebSocketOpsClient
from alarmtop.tui.screens.alarms import AlarmsScreen
from alarmtop.tui.screens.listed import ListScreen
from alarmtop.tui.widgets.table import ConsoleTable
from tests.conftest import RuntimeFactory
from tests.tui.conftest import TICK_S, WAIT_S, Recorder, status_line, table_keys, until
from tests.tui.test_console import connected, run, settle_workers

Pilot = Any
PAGE = "#alarm-page"
S = 1000


class Blinker(DurableObject):
    """An alarm that comes and goes as the test says; firing re-arms it an hour later
    (a moment without an alarm, as the demo's counters and ledgers have)."""

    async def arm(self, delay_ms: int) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms() + delay_ms)

    async def disarm(self) -> None:
        await self.ctx.storage.delete_alarm()

    async def alarm(self, info: AlarmInfo) -> None:
        await self.ctx.storage.put("fired", int(await self.ctx.storage.get("fired") or 0) + 1)
        await self.ctx.storage.set_alarm(self.ctx.now_ms() + 3600 * S)


class Seen(Recorder):
    """Notifications, and every row the console's tables said had left."""

    def __init__(self) -> None:
        super().__init__()
        self.left: list[str] = []
        self._seen: list[Message] = []  # a message is seen again at each node it bubbles to

    def __call__(self, message: Message) -> None:
        super().__call__(message)
        if isinstance(message, ConsoleTable.SelectionLeft) and not any(
                m is message for m in self._seen):
            self._seen.append(message)
            self.left.append(message.left)


class Board:
    """The runtime with its Blinkers, its server, and the console on it."""

    def __init__(self, rt: Any, clock: VirtualClock, server: OpsServer, tokens: Tokens) -> None:
        self.rt, self.clock, self.server = rt, clock, server
        self.app = AlarmtopApp(WebSocketOpsClient(server.url, tokens.operator, timeout_s=WAIT_S),
                               target="churn", confirm_actions=False)

    async def arm(self, name: str, in_s: float) -> None:
        await self.rt.get(Blinker, name).arm(int(in_s * S))
        await self.clock.advance(0)

    async def disarm(self, name: str) -> None:
        await self.rt.get(Blinker, name).disarm()
        await self.clock.advance(0)

    async def fire_now_targets(self) -> list[tuple[str | None, bool]]:
        """(target, ok) of every fire_now the server audited, oldest first."""
        rows = await self.rt.audit.list(limit=100)
        return [(r["target"], r["ok"]) for r in reversed(rows) if r["action"] == "fire_now"]


@pytest.fixture
async def board(make_runtime: RuntimeFactory, clock: VirtualClock,
                tokens: Tokens) -> AsyncIterator[Board]:
    rt = await make_runtime(Blinker)
    server = OpsServer(rt, tokens, "127.0.0.1", 0, tick_s=TICK_S)
    await server.start()
    b = Board(rt, clock, server, tokens)
    try:
        yield b
    finally:
        await b.app.client.close()
        await server.stop()


def ref(name: str) -> str:
    return f"Blinker/{name}"


def table(pilot: Pilot) -> ConsoleTable:
    return pilot.app.screen.query_one(PAGE, ConsoleTable)


def listed(pilot: Pilot) -> list[str]:
    """What the server's last answer listed (the table may hold one more row)."""
    screen = pilot.app.screen
    assert isinstance(screen, ListScreen)
    return [str(r["object"]) for r in screen.panes[0].rows()]


def others(pilot: Pilot) -> list[str]:
    """The rows the table shows, but b's."""
    return [k for k in table_keys(pilot, PAGE) if k != ref("b")]


async def press_n(pilot: Pilot, board: Board) -> None:
    """`n` (no confirmation), and wait until the server audited it."""
    before = len(await board.fire_now_targets())
    await pilot.press("n")
    await until(pilot, lambda: _more(board, before), "the fire_now to reach the server")


async def _more(board: Board, before: int) -> bool:
    return len(await board.fire_now_targets()) > before


async def test_the_cursor_holds_its_object_through_churn_and_n_fires_it(
        board: Board, monkeypatch: pytest.MonkeyPatch) -> None:
    # A row missing from refreshes is held as long as this test needs, whatever the
    # machine's speed: the hold's length is the table's, tested in test_table.py.
    monkeypatch.setattr(ConsoleTable, "HOLD_S", 600.0)
    for i, name in enumerate("abcd", start=1):
        await board.arm(name, 10 * i)
    app, rec = board.app, Seen()
    async with run(app, rec) as pilot:
        await connected(pilot)
        await pilot.press("2")
        await until(pilot, lambda: isinstance(pilot.app.screen, AlarmsScreen)
                    and table_keys(pilot, PAGE) == [ref(n) for n in "abcd"], "view 2")
        await pilot.press("down")
        assert table(pilot).selected == ref("b")
        expected: list[tuple[str | None, bool]] = []
        for round_ in range(4):
            # b's alarm goes: the next refresh leaves it out; the row stays, dimmed, and
            # the cursor on it.
            await board.disarm("b")
            await until(pilot, lambda: ref("b") not in listed(pilot)
                        and table(pilot).held == ref("b"), "a refresh without b, drawn")
            assert table(pilot).selected == ref("b")
            # Others re-sort around it meanwhile: each round another comes first.
            other = "acd"[round_ % 3]
            await board.arm(other, 0.9 - 0.2 * round_)
            await until(pilot, lambda o=other: others(pilot)[:1] == [ref(o)],  # type: ignore[misc]
                        f"{other} first")
            assert table(pilot).selected == ref("b")
            # `n` now fires b, the object highlighted, though the server has no alarm
            # for it at this moment: refused, with the server's reason.
            await press_n(pilot, board)
            expected.append((ref("b"), False))
            assert await board.fire_now_targets() == expected
            # b comes back, somewhere else in the order: the cursor goes with it.
            await board.arm("b", 5 + 20 * round_)
            await until(pilot, lambda: ref("b") in listed(pilot)
                        and table(pilot).held is None, "b back, listed, drawn")
            assert table(pilot).selected == ref("b")
            assert table_keys(pilot, PAGE).index(ref("b")) == table(pilot).cursor_row
            # `n` fires b, and its alarm re-arms itself (it runs when the clock moves).
            await press_n(pilot, board)
            expected.append((ref("b"), True))
            assert await board.fire_now_targets() == expected
            await board.clock.advance(0.1)
            assert table(pilot).selected == ref("b")
        assert "left this view" not in status_line(pilot)
        assert rec.left == []
        await settle_workers(pilot)


async def test_a_sort_or_filter_keeps_the_cursor_on_its_object(board: Board) -> None:
    """A new sort: the cursor stays on its object wherever it now is. A filter that
    leaves it out: the cursor goes to the first row and the status line says the
    object is filtered out (not that it left)."""
    for i, name in enumerate("abcd", start=1):
        await board.arm(name, 10 * (5 - i))  # d is due first, a last
    app, rec = board.app, Seen()
    async with run(app, rec) as pilot:
        await connected(pilot)
        await pilot.press("2")
        await until(pilot, lambda: isinstance(pilot.app.screen, AlarmsScreen)
                    and table_keys(pilot, PAGE) == [ref(n) for n in "dcba"], "view 2")
        await pilot.press("down")
        assert table(pilot).selected == ref("c")
        await pilot.press("s")  # by object: a b c d
        await until(pilot, lambda: table_keys(pilot, PAGE) == [ref(n) for n in "abcd"],
                    "sorted by object")
        assert table(pilot).selected == ref("c") and table(pilot).cursor_row == 2
        await pilot.press("slash")
        await pilot.press(*"Blinker/a", "enter")
        await until(pilot, lambda: table_keys(pilot, PAGE) == [ref("a")], "filtered")
        assert table(pilot).selected == ref("a")
        await until(pilot, lambda: f"{ref('c')} is not on this page" in status_line(pilot),
                    "the status line")
        assert "left this view" not in status_line(pilot)
        await settle_workers(pilot)


async def test_an_object_that_truly_leaves_is_said_once(board: Board) -> None:
    """Gone for longer than the hold: the status line says so once, the cursor is on the
    row now on its line, and it follows that row from then on."""
    for i, name in enumerate("abc", start=1):
        await board.arm(name, 10 * i)
    app, rec = board.app, Seen()
    async with run(app, rec) as pilot:
        await connected(pilot)
        await pilot.press("2")
        await until(pilot, lambda: isinstance(pilot.app.screen, AlarmsScreen)
                    and table_keys(pilot, PAGE) == [ref(n) for n in "abc"], "view 2")
        await pilot.press("down")
        table(pilot).hold_s = 0.0  # gone at the first refresh that leaves it out
        await board.disarm("b")
        await until(pilot, lambda: table_keys(pilot, PAGE) == [ref("a"), ref("c")], "b gone")
        await until(pilot, lambda: f"{ref('b')} left this view" in status_line(pilot),
                    "the status line")
        assert table(pilot).selected == ref("c")
        assert f"the cursor is on {ref('c')}" in status_line(pilot)
        await board.arm("c", 1)  # c moves first: the cursor goes with it
        await until(pilot, lambda: table_keys(pilot, PAGE) == [ref("c"), ref("a")], "c first")
        assert table(pilot).selected == ref("c")
        assert rec.left == [ref("b")]  # said once
        await pilot.press("n")
        await until(pilot, lambda: _more(board, 0), "the fire_now")
        assert await board.fire_now_targets() == [(ref("c"), True)]
        await settle_workers(pilot)
