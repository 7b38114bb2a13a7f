"""A key that does nothing says why, and the footer offers what applies to the row as it
is now: Pilot tests against a real server.

With a viewer token or `--read-only`, r n f x p z b m R did nothing and said nothing.
`R Retry comp.` was offered on an execution held with `H` (the server then said
"nothing to retry"), and the footer kept `p Resume` after the alarm was resumed.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets._footer import FooterKey

from alarmtop.examples.flaky import Flaky
from alarmtop.tui.screens.alarms import AlarmsScreen, DeadLettersScreen
from alarmtop.tui.screens.executions import ExecutionsScreen
from alarmtop.tui.screens.lists import FaultsScreen
from alarmtop.tui.screens.timers import TimersScreen
from alarmtop.tui.widgets.footer import StatusLine
from tests.tui.conftest import Harness, status_line, table_keys, until
from tests.tui.test_console import connected, run, settle_workers, start, view

Pilot = Any


def footer(pilot: Pilot) -> dict[str, str]:
    """The keys the footer draws now: key -> label."""
    return {k.key: k.description for k in pilot.app.screen.query(FooterKey)}


async def says(pilot: Pilot, key: str, *words: str) -> str:
    """Press `key`; the status line then names the key and says `words`."""
    await pilot.press(key)
    await until(pilot, lambda: status_line(pilot).startswith(f"{key} (")
                and all(w in status_line(pilot) for w in words),
                f"the status line to explain {key!r} with {words} (it says "
                f"{status_line(pilot)!r})")
    return status_line(pilot)


@pytest.mark.parametrize("how", ["viewer", "read-only"])
async def test_a_read_only_console_says_why_an_action_key_does_nothing(
        harness: Harness, how: str) -> None:
    dead = await harness.dead_letter()
    eid, fid = await harness.needs_human()
    await harness.pending()  # a timer on the board
    if how == "viewer":
        app, rec = await start(harness, token=harness.tokens.viewer)
        why = "a viewer's token"
    else:
        app, rec = await start(harness, read_only=True)
        why = "--read-only"
    async with run(app, rec) as pilot:
        await connected(pilot)
        for key, screen, table, rows, keys in (
                ("5", DeadLettersScreen, "#alarm-page", [dead], "rnfxpzbm"),
                ("3", ExecutionsScreen, "#execution-page", [eid], "RcahHpdF"),
                ("6", FaultsScreen, "#fault-table", [fid], "x")):
            await view(pilot, key, screen, table, rows)
            for k in keys:
                said = await says(pilot, k, "read-only", why)
                assert "for an operator" in said
                assert isinstance(pilot.app.screen, screen), "no dialog may open"
                await until(pilot, lambda s=said: rec.has(s, "warning"),  # type: ignore[misc]
                            "the notice")
        await pilot.press("9")
        await until(pilot, lambda: isinstance(pilot.app.screen, TimersScreen)
                    and pilot.app.screen.table.row_count > 0, "the timers board")
        for k in "nz":
            await says(pilot, k, "read-only")
        assert await harness.rt.audit.list() == []  # nothing reached the server
        await settle_workers(pilot)


async def test_a_key_that_does_not_apply_to_the_row_says_why(harness: Harness) -> None:
    pending = await harness.pending()
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "2", AlarmsScreen, "#alarm-page", [pending])
        await says(pilot, "x", f"{pending} is not a dead letter (it is pending)")
        await says(pilot, "b", "nothing is marked", "space")
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [])
        await says(pilot, "a", "no execution is selected")
        assert await harness.rt.audit.list() == []
        await settle_workers(pilot)


async def test_retry_compensation_is_not_offered_on_an_execution_held_with_h(
        harness: Harness) -> None:
    """Held with H it needs a human too, but no compensation failed: R is not in the
    footer, and pressing it says why instead of asking the server."""
    eid = await harness.festival("hsf-day1")
    await harness.rt.executions.hand_to_human(eid, "check with the venue")
    assert (await harness.describe(eid))["status"] == "needs_human"
    stuck, _ = await harness.needs_human("hsf-day2")
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [stuck, eid])
        await until(pilot, lambda: footer(pilot).get("R") == "Retry comp.", "R on the stuck one")
        await pilot.press("down")
        await until(pilot, lambda: "R" not in footer(pilot), "R gone on the held one")
        assert {"h", "a"} <= set(footer(pilot))  # resolve and abort do apply
        await says(pilot, "R", "held for a human", "nothing to retry")
        assert [a for a in await harness.rt.audit.list()
                if a["action"] == "retry_compensation"] == []
        await settle_workers(pilot)


async def test_the_footer_follows_a_pause_made_elsewhere(harness: Harness) -> None:
    """The alarm is resumed by someone else: the footer's p goes from Resume to Pause
    without a key (and back when it is paused again)."""
    ref = await harness.pending()
    await harness.rt.pause_alarm(Flaky, "payments-9")
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "2", AlarmsScreen, "#alarm-page", [ref])
        await until(pilot, lambda: footer(pilot).get("p") == "Resume", "p Resume")
        await harness.rt.resume_alarm(Flaky, "payments-9")
        await until(pilot, lambda: footer(pilot).get("p") == "Pause", "p Pause, no key pressed")
        await harness.rt.pause_alarm(Flaky, "payments-9")
        await until(pilot, lambda: footer(pilot).get("p") == "Resume", "p Resume again")
        assert table_keys(pilot, "#alarm-page") == [ref]
        await settle_workers(pilot)


async def test_a_status_line_does_not_outlive_its_view(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a view's status line says is about that view as it was: it is gone when the
    operator comes back from another view, and after `StatusLine.LIFE_S` anyway ("the
    view is empty" stayed over a list that had filled since)."""
    monkeypatch.setattr(StatusLine, "LIFE_S", 0.5)
    pending = await harness.pending()
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "2", AlarmsScreen, "#alarm-page", [pending])
        await says(pilot, "x", "not a dead letter")
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [])
        await view(pilot, "2", AlarmsScreen, "#alarm-page", [pending])
        assert status_line(pilot) == ""
        await says(pilot, "x", "not a dead letter")
        await until(pilot, lambda: status_line(pilot) == "", "the line to go by itself")
        await settle_workers(pilot)
