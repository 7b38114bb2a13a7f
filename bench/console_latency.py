"""Scenario 5, the console side: keypress to repaint with 100,000 pending alarms.

A server process holds 100,000 pending alarms (an hour or more ahead, written
straight into the alarm index in batches of 10,000, as tests/server/test_scale.py
does; the runtime is then started again on that data, so its scheduler loads its
window, as after a restart) and, unless `--rate 0`, 1,000 more objects whose alarms
fire and re-arm so that 1,000 alarms/s fire (the deltas then carry 200 changed rows
4 times a second). The console process runs the real `AlarmtopApp` headless under
Textual's `run_test(size=(160, 45))`, connected to that server by
`WebSocketOpsClient`, and presses keys:

- `down` 99 times in the alarms view (`2`), on its page of 100 alarms (from the
  first row to the last);
- `pagedown` 100 times there (the next 100 alarms: a round trip to the server, which
  pages through the 100,000);
- `1` .. `8` in turn, 13 rounds (the first round composes each view; later rounds
  resume it and the view re-fetches its page in the background).

`--quick` presses 30 `down`, 20 `pagedown` and 3 rounds of views.

Latency of one press: from posting the key event to the app's driver (what Pilot's
`press` does, and what a key arriving from the terminal does) to the end of the
first repaint whose frame shows its effect. A repaint is a call of
`App._display(screen, update)`: the screen's compositor has just rendered the
changed regions into an update (headless, the update is not written to a terminal).
The effect is checked at that moment: for `down`, the table has handled the key
and its cursor is where that left it (on the same row, or on the same line when
the row has gone: with alarms firing the page reorders under the cursor); for
`pagedown`, the table shows a new page (page offset moved, first row changed);
for a view key, the screen displayed is the new view. Presses are 50 ms apart (an
operator's fast cadence), each one after the previous one was shown.
`await pilot.press()` is not used as the clock: it waits for the process to go
idle with 20 ms sleeps (two of them per key), which would be measured too.

Per run: p50, p90 and max of each kind of press (a p90 needs 20 presses, so that
two lie above it). Over the presses of all runs pooled (in a full run 297 `down`,
300 `pagedown`, 312 view switches): p99, which needs 200 presses, and the max;
where there are fewer, p99 is "n/a" and the max is reported as the max, never as a
p99. Also the console
process's memory (RSS now and peak) and how many alarms its state holds
(`len(app.state.alarms)`: it must not hold the 100,000). Each repeat is a fresh
console process and a fresh server process on a copy of the same filled data.
`--hog 0,1` runs the set again with a process keeping one core busy beside it.

    .venv/bin/python bench/console_latency.py [--quick] [--repeats 3] [--rate 0,1000]
        [--alarms 100000] [--hog 0] [--profile out.html]

Full: about 8-15 min at 100,000 pending (two rates, 3 runs each; most of it the
presses), plus 1-2 min to write 1,000,000 pending with --alarms 1000000
(--quick: about 2 min).

`--profile` makes one run of the first rate with the console process under
pyinstrument (HTML there, text beside it); its latencies are then inflated.
"""

from __future__ import annotations

import asyncio
import json
import resource
import shutil
import subprocess
import sys
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import (
    Table,
    base_parser,
    cpu_hogs,
    current_rss_mb,
    emit_child,
    loadavg,
    machine,
    peak_rss_mb,
    percentile,
    print_config,
    run_child,
    run_child_body,
    samples_needed,
    version_of,
    work_area,
    write_json,
)
from fanout import Plan, Ticker

from alarmtop.core import AlarmInfo, DurableObject, Runtime, SystemClock

OPERATOR = "operator-token-for-the-console-bench"
VIEWER = "viewer-token-for-the-console-bench"
SIZE = (160, 45)
BATCH = 10_000
HOUR_MS = 3_600_000
GAP_S = 0.05  # between presses
PRESS_TIMEOUT_S = 10.0
BAR_MS = 100.0
VIEW_KEYS = ["1", "2", "3", "4", "5", "6", "7", "8"]


class Quiet(DurableObject):
    async def alarm(self, info: AlarmInfo) -> None:
        pass


# -- the server process ------------------------------------------------------------------


async def fill(data: Path, pending: int) -> None:
    """`pending` alarms two hours and more ahead, straight into the alarm index."""
    from alarmtop.core.model.alarm_policy import AlarmRecord

    rt = Runtime(data, clock=SystemClock())
    rt.register(Quiet)
    await rt.start()
    base = int(time.time() * 1000) + 2 * HOUR_MS
    db = rt.backend.database
    for lo in range(0, pending, BATCH):
        await db.write([AlarmRecord("Quiet", f"p{i:06d}", base + i, next_attempt_ms=base + i)
                           for i in range(lo, min(pending, lo + BATCH))])
    await rt.stop()


async def serve(data: Path, rate: float, objects: int) -> None:
    """Start on the filled data (a restart), arm the tickers, serve until stdin closes."""
    from alarmtop.server.app import OpsServer
    from alarmtop.server.auth import Tokens

    plan = Plan(objects, rate) if rate else None
    rt = Runtime(data, clock=SystemClock(), env=plan)
    rt.register(Quiet)
    rt.register(Ticker)
    await rt.start()
    if plan is not None:
        plan.t0_ms = time.time() * 1000 + 500
        await asyncio.gather(*(rt.get(Ticker, f"t{i:05d}").arm(plan.first_due(i))
                               for i in range(objects)))
    server = OpsServer(rt, Tokens(OPERATOR, VIEWER), "127.0.0.1", 0, tick_s=0.25)
    await server.start()
    print(server.url, flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # until the console closes it
    if plan is not None:
        plan.recording = False
    await server.stop()
    await rt.stop()


# -- the console process -----------------------------------------------------------------


class Notices(list[str]):
    """A `message_hook` for `run_test`: what the console told the operator (a failed
    fetch, say), for a press that never shows to report."""

    def __call__(self, message: Any) -> None:
        from textual.notifications import Notify

        if isinstance(message, Notify):
            self.append(str(message.notification.message))


class Repaints:
    """Wraps `app._display`: resolves the waiting press at the first repaint showing it."""

    def __init__(self, app: Any, notices: Notices) -> None:
        self.app = app
        self.original = app._display
        self.check: Callable[[Any], bool] | None = None
        self.shown = asyncio.Event()
        self.at = 0.0
        self.count = 0
        self.notices = notices
        app._display = self._display

    def _display(self, screen: Any, renderable: Any) -> None:
        self.original(screen, renderable)
        if renderable is None:
            return
        self.count += 1
        if self.check is not None and self.check(screen):
            self.at = time.perf_counter()
            self.check = None
            self.shown.set()

    async def press(self, key: str, check: Callable[[Any], bool]) -> float:
        """Post `key` to the driver; ms until the first repaint for which `check` holds."""
        from textual import events

        self.shown.clear()
        self.check = check
        event = events.Key(key, key if len(key) == 1 else None)
        event.set_sender(self.app)
        t0 = time.perf_counter()
        self.app._driver.send_message(event)
        try:
            await asyncio.wait_for(self.shown.wait(), PRESS_TIMEOUT_S)
        except TimeoutError:
            raise SystemExit(f"key {key!r}: no repaint showed it within "
                             f"{PRESS_TIMEOUT_S:g} s (console running: "
                             f"{self.app.is_running}; its last notices: "
                             f"{self.notices[-3:]})") from None
        return (self.at - t0) * 1000


async def until(check: Callable[[], bool], what: str, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def console_child(opts: dict[str, Any]) -> dict[str, float]:
    """Start the server process, measure the console against it, stop the server."""
    server = subprocess.Popen(
        [sys.executable, __file__, "--server-only", opts["dir"], str(opts["rate"]),
         str(opts["objects"])], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None and server.stdin is not None
    try:
        url = server.stdout.readline().strip()
        if not url.startswith("ws://"):
            raise SystemExit(f"server failed to start: {url!r}")
        return run_child_body(console_run(opts, url), opts.get("profile"))
    finally:
        server.stdin.close()  # the server stops when its stdin closes
        server.wait(timeout=30)


async def console_run(opts: dict[str, Any], url: str) -> dict[str, float]:
    from textual.widgets import DataTable

    from alarmtop.tui.app import AlarmtopApp
    from alarmtop.tui.client import WebSocketOpsClient
    from alarmtop.tui.screens.alarms import AlarmsScreen

    rss_before = current_rss_mb()
    app = AlarmtopApp(WebSocketOpsClient(url, OPERATOR), target=f"bench@{url}")
    down, page, views = array("d"), array("d"), array("d")
    first_views: list[float] = []
    result: dict[str, float] = {}
    notices = Notices()
    async with app.run_test(size=SIZE, message_hook=notices):
        t_connect = time.perf_counter()
        await until(lambda: app.state.connected and bool(app.state.counts), "the snapshot")
        connect_ms = (time.perf_counter() - t_connect) * 1000
        rp = Repaints(app, notices)
        await rp.press("2", lambda s: isinstance(s, AlarmsScreen))
        screen = app.screen
        assert isinstance(screen, AlarmsScreen)
        table = screen.query_one("#alarm-page", DataTable)
        await until(lambda: table.row_count == 100 and screen.total > 0,
                    "the first page of alarms")
        table.focus()
        await asyncio.sleep(0.2)
        total = screen.total
        load0 = loadavg()
        cpu0, t0 = _cpu(), time.perf_counter()

        if table.cursor_row + opts["downs"] >= table.row_count:
            raise SystemExit(f"{opts['downs']} downs from row {table.cursor_row} would pass "
                             f"the page's {table.row_count} rows")
        # Where a press left the cursor, noted when the table handles it: with alarms
        # firing, the page reorders under the cursor (which stays on its row's key,
        # or its line when that row is gone), so "the next line" can be stale by the
        # time the key is handled; what counts is a repaint showing where it went.
        moved: dict[str, Any] = {}
        cursor_down = table.action_cursor_down

        def noting_cursor_down() -> None:
            cursor_down()
            moved.update(row=table.cursor_row, key=table.selected)

        table.action_cursor_down = noting_cursor_down  # type: ignore[method-assign]
        for _ in range(opts["downs"]):
            moved.clear()
            down.append(await rp.press("down", lambda s: s is screen and bool(moved) and (
                table.selected == moved["key"] or table.cursor_row == moved["row"])))
            await asyncio.sleep(GAP_S)

        for _ in range(opts["pages"]):
            offset = screen.page_offset + 100
            first = str(next(iter(table.rows)).value)
            page.append(await rp.press(
                "pagedown", lambda s, offset=offset, first=first: s is screen
                and screen.page_offset == offset and table.row_count > 0
                and str(next(iter(table.rows)).value) != first))
            await asyncio.sleep(GAP_S)

        for round_ in range(opts["rounds"]):
            for key in [*VIEW_KEYS[2:], *VIEW_KEYS[:2]] if round_ == 0 else VIEW_KEYS:
                mode = app.MODES[{"1": "overview", "2": "alarms", "3": "executions",
                                  "4": "objects", "5": "dead", "6": "faults",
                                  "7": "audit", "8": "events"}[key]]
                ms = await rp.press(key, lambda s, mode=mode: type(s) is mode
                                    and s is app.screen)
                views.append(ms)
                if round_ == 0 and key not in ("1", "2"):
                    first_views.append(ms)
                await asyncio.sleep(GAP_S)

        cpu, wall = _cpu() - cpu0, time.perf_counter() - t0
        result = {
            "down_p50_ms": percentile(down, 50), "down_p90_ms": percentile(down, 90),
            "down_max_ms": max(down),
            "page_p50_ms": percentile(page, 50), "page_p90_ms": percentile(page, 90),
            "page_max_ms": max(page),
            "view_p50_ms": percentile(views, 50), "view_p90_ms": percentile(views, 90),
            "view_max_ms": max(views),
            "view_first_max_ms": max(first_views),
            "over_bar": float(sum(x > BAR_MS for x in (*down, *page, *views))),
            "presses": float(len(down) + len(page) + len(views)),
            "connect_ms": connect_ms,
            "state_alarms": float(len(app.state.alarms)),
            "page_rows": float(len(screen.rows)),
            "server_total": float(total),
            "rss_mb": current_rss_mb(),
            "rss_growth_mb": current_rss_mb() - rss_before,
            "peak_rss_mb": peak_rss_mb(),
            "console_cpu_pct": cpu / wall * 100,
            "repaints_per_s": rp.count / wall,
            "load_before": load0, "load_after": loadavg(),
            "presses_ms": {"down": list(down), "pagedown": list(page), "view": list(views)},
        }
        await app.client.close()
    return result


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# -- the parent --------------------------------------------------------------------------

UNITS = {
    "down_p50_ms": "ms", "down_p90_ms": "ms", "down_max_ms": "ms",
    "page_p50_ms": "ms", "page_p90_ms": "ms", "page_max_ms": "ms",
    "view_p50_ms": "ms", "view_p90_ms": "ms", "view_max_ms": "ms",
    "view_first_max_ms": "ms", "over_bar": "", "presses": "", "connect_ms": "ms",
    "state_alarms": "", "page_rows": "", "server_total": "",
    "rss_mb": "MiB", "rss_growth_mb": "MiB", "peak_rss_mb": "MiB",
    "console_cpu_pct": "%", "repaints_per_s": "/s", "load_before": "", "load_after": "",
}
LABELS = {
    "down_p50_ms": "down (next row) p50",
    "down_p90_ms": "down p90",
    "down_max_ms": "down max",
    "page_p50_ms": "pagedown (server round trip) p50",
    "page_p90_ms": "pagedown p90",
    "page_max_ms": "pagedown max",
    "view_p50_ms": "switch view 1..8 p50",
    "view_p90_ms": "switch view p90",
    "view_max_ms": "switch view max",
    "view_first_max_ms": "switch view, first visit (compose), max",
    "over_bar": f"presses over {BAR_MS:g} ms",
    "presses": "presses",
    "connect_ms": "connect to snapshot shown",
    "state_alarms": "len(app.state.alarms)",
    "page_rows": "rows on the alarms page",
    "server_total": "alarms the server counts",
    "rss_mb": "console RSS at the end",
    "rss_growth_mb": "console RSS growth from start",
    "peak_rss_mb": "console peak RSS",
    "console_cpu_pct": "console CPU while pressing",
    "repaints_per_s": "repaints/s while pressing",
    "load_before": "load average (1 min) before",
    "load_after": "load average (1 min) after",
}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--server-only":
        data, rate, objects = sys.argv[2:5]
        asyncio.run(serve(Path(data), float(rate), int(objects)))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--fill-only":
        asyncio.run(fill(Path(sys.argv[2]), int(sys.argv[3])))
        return
    parser = base_parser(__doc__)
    parser.add_argument("--pending", "--alarms", type=int, default=100_000, dest="pending",
                        help="pending alarms the server holds (100,000; --alarms 1000000)")
    parser.add_argument("--rate", default=None,
                        help="alarms/s firing meanwhile, comma-separated runs "
                             "(quick: 1000; full: 0,1000)")
    parser.add_argument("--objects", type=int, default=1000, help="objects that fire")
    parser.add_argument("--profile", default=None,
                        help="profile the console in one run of the first rate "
                             "(pyinstrument, .html)")
    parser.add_argument("--hog", default="0",
                        help="CPU hogs beside, one set of runs per value (e.g. 0,1)")
    args = parser.parse_args()
    if args.child:
        emit_child(console_child(json.loads(args.child)))
        return
    rates = [float(r) for r in (args.rate or ("1000" if args.quick else "0,1000")).split(",")]
    rates = rates[:1] if args.profile else rates
    hogs = [int(h) for h in args.hog.split(",")]
    counts = ({"downs": 30, "pages": 20, "rounds": 3} if args.quick
              else {"downs": 99, "pages": 100, "rounds": 13})
    cfg = {"machine": machine(), "textual": version_of("textual"),
           "server": f"OpsServer (tick 0.25 s) over {args.pending:,} pending alarms, "
                     "embedded SQLite (WAL, synchronous=FULL)",
           "console": f"AlarmtopApp headless, size {SIZE[0]}x{SIZE[1]}, WebSocketOpsClient",
           "presses per run": f"{counts['downs']} down, {counts['pages']} pagedown, "
                              f"{counts['rounds']} rounds of 1..8, {GAP_S * 1000:g} ms apart",
           "alarms/s firing": rates, "CPU hogs": hogs}
    print_config("console keypress to repaint", cfg)
    out: dict[str, Any] = {"script": "console_latency", "config": cfg, "tables": {},
                           "pooled": []}
    with work_area(args.dir, "console-latency-") as root:
        base = root / "filled"
        t = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--fill-only", str(base), str(args.pending)],
                       check=True)
        print(f"  {args.pending:,} pending alarms written in {time.perf_counter() - t:.1f} s",
              file=sys.stderr)
        for hog in hogs:
            with cpu_hogs(hog):
                for rate in rates:
                    measure(args, root, base, rate, hog, counts, out)
    print(f"load average at the end: {loadavg()}")
    if args.json:
        print(json.dumps(out["tables"]))
    write_json(args.json_out, out)


def measure(args: Any, root: Path, base: Path, rate: float, hog: int,
            counts: dict[str, int], out: dict[str, Any]) -> None:
    table = Table(f"console keypress to repaint: {args.pending:,} pending alarms, "
                  f"{rate:,.0f} alarms/s firing, {hog} CPU hog(s) beside")
    pooled: dict[str, list[float]] = {"down": [], "pagedown": [], "view": []}
    for i in range(1 if args.profile else max(3, args.repeats)):
        data = root / f"run{i}"
        shutil.copytree(base, data)
        opts = {"dir": str(data), "rate": rate, "objects": args.objects,
                "profile": args.profile, **counts}
        try:
            result = run_child(__file__, ["--child", json.dumps(opts)])
        finally:
            shutil.rmtree(data, ignore_errors=True)
        for kind, values in result.pop("presses_ms").items():
            pooled[kind].extend(values)
        for key in UNITS:
            table.add(LABELS[key], result[key], UNITS[key])
        print(f"  {rate:,.0f}/s, {hog} hog(s): down p90 {result['down_p90_ms'] or 0:.1f} ms, "
              f"pagedown p90 {result['page_p90_ms'] or 0:.1f} ms, view p90 "
              f"{result['view_p90_ms'] or 0:.1f} ms, state holds "
              f"{result['state_alarms']:.0f} alarms", file=sys.stderr)
    table.print()
    print(f"-- pooled over the {len(table.rows[LABELS['presses']])} runs (p99 needs "
          f"{samples_needed(99)} presses of a kind; bar: p99 < {BAR_MS:g} ms, this machine)")
    for kind, values in pooled.items():
        p99 = percentile(values, 99)
        verdict = ("n/a: too few presses for a p99; the max is " if p99 is None else
                   f"p99 {p99:.1f} ms ({'met' if p99 < BAR_MS else 'NOT met'}), max ")
        print(f"   {kind:<9} {len(values):>4} presses: {verdict}{max(values):.1f} ms")
        out["pooled"].append({"rate": rate, "hog": hog, "kind": kind, "presses": len(values),
                              "p99_ms": p99, "max_ms": max(values),
                              "over_bar": sum(v > BAR_MS for v in values)})
    out["tables"][table.title] = table.as_dict()

if __name__ == "__main__":
    main()
