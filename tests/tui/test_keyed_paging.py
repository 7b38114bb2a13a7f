"""The console pages by key against a real server: each page after the first starts
after the cursor of the row before it (no offset walk), positions read "201-300 of
350", and a position that rows before it have since moved reads "about"."""

from __future__ import annotations

from typing import Any

from alarmtop.core.model.alarm_policy import AlarmRecord
from tests.conftest import START_MS
from tests.tui.conftest import Harness, table_keys, until
from tests.tui.test_console import connected, run, settle_workers, start

Pilot = Any
HOUR_MS = 3_600_000


def subtitle(pilot: Pilot, table: str) -> str:
    return str(pilot.app.screen.query_one(table).border_subtitle)


async def test_pages_go_by_key_and_say_about_when_rows_moved_before_them(
        harness: Harness) -> None:
    await harness.rt.backend.database.write([
        AlarmRecord("Flaky", f"p-{i:03d}", START_MS + HOUR_MS + i,
                    next_attempt_ms=START_MS + HOUR_MS + i) for i in range(350)])
    app, rec = await start(harness)
    asked: list[tuple[str, dict[str, Any]]] = []
    request = app.client.request

    async def recording(op: str, **args: Any) -> Any:
        asked.append((op, args))
        return await request(op, **args)

    app.client.request = recording  # type: ignore[method-assign]
    async with run(app, rec) as pilot:
        await connected(pilot)
        await pilot.press("2")
        await until(pilot, lambda: "1-100 of 350" in subtitle(pilot, "#alarm-page"),
                    "the first page")
        for _ in range(2):
            await pilot.press("pagedown")
        await until(pilot, lambda: "201-300 of 350" in subtitle(pilot, "#alarm-page")
                    and table_keys(pilot, "#alarm-page")[0] == "Flaky/p-200", "page three")
        deep = [a for op, a in asked if op == "alarms" and a.get("offset", 0) >= 100]
        assert deep == [], deep  # every page past the first came after a cursor
        keyed = [a["after"][1:] for op, a in asked if op == "alarms" and "after" in a]
        assert ["Flaky", "p-099"] in keyed  # the window of page three: from page two on
        assert "about" not in subtitle(pilot, "#alarm-page")

        await harness.rt.backend.database.write(
            [], [("Flaky", f"p-{i:03d}") for i in range(10)])  # ten go before the page
        await harness.clock.advance(0)
        await until(pilot, lambda: "about 201-300 of 340" in subtitle(pilot, "#alarm-page"),
                    "the page after the same row, its position now about right")
        assert table_keys(pilot, "#alarm-page")[0] == "Flaky/p-200"  # the same rows
        await settle_workers(pilot)
