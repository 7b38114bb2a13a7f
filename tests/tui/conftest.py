"""Shared pieces for the console's Pilot tests: a real runtime, a real server, a console.

`Harness` holds one runtime on the test's `VirtualClock`, one `OpsServer` on
127.0.0.1:0 with a fast delta tick, and helpers that put the runtime into the
states an operator acts on (a dead letter, a pending alarm, a festival waiting
for its verdict, one that needs a human). `console()` opens an `AlarmtopApp` on
that server; `Recorder` keeps every notification the console posts, so a test
can check that an action's result was shown. `until()` waits for the console to
catch up with frames from the server: it polls with short pilot pauses and fails
after a bounded number of them, it never sleeps for a timer; its check may also be
a coroutine function, to wait for the runtime (a batch's status, an alarm's state).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pytest
from rich.text import Text
from textual.message import Message
from textual.notifications import Notify
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from alarmtop.core import DurableObject, RetryPolicy, Runtime, VirtualClock
from alarmtop.examples.festival import FestivalServices, build_festival
from alarmtop.examples.flaky import Flaky
from alarmtop.server.app import OpsServer
from alarmtop.server.auth import Tokens
from alarmtop.tui.app import AlarmtopApp
from alarmtop.tui.client import WebSocketOpsClient
from alarmtop.tui.widgets.footer import StatusLine
from tests.conftest import RuntimeFactory

OPERATOR = "operator-token-for-console-tests"
VIEWER = "viewer-token-for-console-tests"
SIZE = (160, 48)
TICK_S = 0.02
POLL_S = 0.05
WAIT_S = 20.0  # a bound, not a pace: a check ends as soon as it holds (2 cores, shared)
# Three attempts 0.5 s and 1 s apart: a dead letter after 1.5 virtual seconds.
FAST_RETRY = RetryPolicy(max_retries=2, initial_delay_s=0.5, backoff_rate=2.0)
FESTIVAL = "festival-stream"
FAILING_STEP = "compensate_open_viewing_page"


class Recorder:
    """A `message_hook` for `run_test` that keeps every notification the console posts;
    within `listening()`, also every line said on a status line."""

    def __init__(self) -> None:
        self.notices: list[tuple[str, str]] = []  # (severity, message)
        self.said: list[str] = []  # status lines, in the order said

    @contextlib.contextmanager
    def listening(self) -> Iterator[None]:
        """Keep what status lines say. A line is replaced by the next (an action's result
        by the news that its row left the view): a check of the line at one moment races
        with the console's own pace, which a loaded machine slows."""
        say = StatusLine.say

        def said(line: StatusLine, text: str, severity: str = "information") -> None:
            self.said.append(text)
            say(line, text, severity)

        with mock.patch.object(StatusLine, "say", said):
            yield

    def __call__(self, message: Message) -> None:
        if isinstance(message, Notify):
            note = message.notification
            self.notices.append((note.severity, str(note.message)))

    def messages(self) -> list[str]:
        return [m for _, m in self.notices]

    def has(self, text: str, severity: str | None = None) -> bool:
        return any(text in m and (severity is None or s == severity) for s, m in self.notices)


async def until(pilot: Pilot[Any], check: Callable[[], object], what: str,
                within_s: float = WAIT_S) -> None:
    """Let the console run until `check()` is truthy (awaited when it returns an
    awaitable); fail saying `what` was awaited."""
    for _ in range(int(within_s / POLL_S)):
        if await _holds(check):
            return
        await pilot.pause(POLL_S)
    if await _holds(check):
        return
    raise AssertionError(f"timed out waiting for {what}")


async def _holds(check: Callable[[], object]) -> bool:
    result = check()
    if inspect.isawaitable(result):
        result = await result
    return bool(result)


def table_keys(pilot: Pilot[Any], selector: str) -> list[str]:
    """The row keys of a DataTable on the active screen, top to bottom."""
    table = pilot.app.screen.query_one(selector, DataTable)
    return [str(k.value) for k in table.rows]


def cell_text(pilot: Pilot[Any], selector: str, key: str) -> list[str]:
    """The plain text of every cell of row `key` of a DataTable on the active screen."""
    table = pilot.app.screen.query_one(selector, DataTable)
    return [c.plain if isinstance(c, Text) else str(c) for c in table.get_row(key)]


def static_text(pilot: Pilot[Any], selector: str) -> str:
    """The plain text a Static on the active screen shows."""
    content = pilot.app.screen.query_one(selector, Static).content
    return content.plain if isinstance(content, Text) else str(content)


def status_text(pilot: Pilot[Any]) -> str:
    return static_text(pilot, "#status")


def status_line(pilot: Pilot[Any]) -> str:
    """What the view's status line says now."""
    return static_text(pilot, "#status-line")


def fixed_keys(pilot: Pilot[Any]) -> str:
    """The right end of the footer: the view's badge, ^p, ? and q."""
    return static_text(pilot, "#fixed-keys")


async def focus(pilot: Pilot[Any], widget_id: str) -> None:
    """Tab through the active screen until the widget `widget_id` has the focus."""
    for _ in range(12):
        focused = pilot.app.focused
        if focused is not None and focused.id == widget_id:
            return
        await pilot.press("tab")
    raise AssertionError(f"tab never reached #{widget_id}")


@dataclass
class Harness:
    rt: Runtime
    clock: VirtualClock
    server: OpsServer
    tokens: Tokens
    services: FestivalServices
    apps: list[AlarmtopApp] = field(default_factory=list)

    def console(self, *, read_only: bool = False, token: str | None = None,
                confirm_actions: bool = True) -> AlarmtopApp:
        """A console on the harness's server (operator token unless told otherwise)."""
        client = WebSocketOpsClient(self.server.url, token or self.tokens.operator,
                                    timeout_s=WAIT_S)
        app = AlarmtopApp(client, target=f"test@127.0.0.1:{self.server.port}",
                          read_only=read_only, confirm_actions=confirm_actions)
        self.apps.append(app)
        return app

    async def dead_letter(self, name: str = "payments-1",
                          cls: type[DurableObject] = Flaky) -> str:
        """A Flaky object (or one of `cls`, registered with the fast ladder and an `arm`
        like Flaky's) whose alarm walked the fast ladder to a dead letter."""
        await self.rt.get(cls, name).arm(0)
        await self.clock.advance(5)
        status = await self.rt.alarm(cls, name)
        assert status is not None and status.state == "dead", status
        return f"{cls.__name__}/{name}"

    async def pending(self, name: str = "payments-9", in_s: int = 3600) -> str:
        """A Flaky object whose alarm is due in `in_s` seconds."""
        await self.rt.get(Flaky, name).arm(in_s * 1000)
        await self.clock.advance(0)
        return f"Flaky/{name}"

    async def festival(self, execution_id: str = "hsf-day1") -> str:
        """A festival saga waiting for its "verdict" callback."""
        await self.rt.executions.start(FESTIVAL, {"eventId": execution_id,
                                                  "startsInSeconds": 3600},
                                       execution_id=execution_id)
        await self.clock.advance(0)
        d = await self.rt.executions.describe(execution_id)
        assert d["status"] == "suspended", d["status"]
        return execution_id

    async def verdict(self, execution_id: str, verdict: str) -> None:
        d = await self.rt.executions.describe(execution_id)
        (cb,) = [c for c in d["callbacks"] if c["name"] == "verdict"]
        await self.rt.executions.send_callback_success(cb["callback_id"], verdict)

    async def needs_human(self, execution_id: str = "hsf-day2") -> tuple[str, str]:
        """A festival cancelled with a compensation that keeps failing, as the demo does:
        returns (execution id, id of the fault that makes it fail)."""
        fid = self.rt.faults.inject(execution_id, "compensation_fail", None, step=FAILING_STEP)
        await self.festival(execution_id)
        await self.verdict(execution_id, "cancel")
        await self.clock.advance(10)
        d = await self.rt.executions.describe(execution_id)
        assert d["status"] == "needs_human", d["status"]
        return execution_id, fid

    async def describe(self, execution_id: str) -> dict[str, Any]:
        return await self.rt.executions.describe(execution_id)


@pytest.fixture
def tokens() -> Tokens:
    return Tokens(operator=OPERATOR, viewer=VIEWER)


@pytest.fixture
async def harness(make_runtime: RuntimeFactory, clock: VirtualClock,
                  tokens: Tokens) -> AsyncIterator[Harness]:
    """A runtime with the demo's Flaky class (fast ladder) and the festival saga, served
    on 127.0.0.1:0. The server stops before the runtime (this fixture depends on it)."""
    rt = await make_runtime(Flaky, policies={"Flaky": FAST_RETRY})
    services = FestivalServices(rt.ledger)
    rt.register_execution(build_festival(services))
    server = OpsServer(rt, tokens, "127.0.0.1", 0, tick_s=TICK_S)
    await server.start()
    h = Harness(rt, clock, server, tokens, services)
    try:
        yield h
    finally:
        for app in h.apps:
            await app.client.close()
        await h.server.stop()
