"""The Prometheus endpoint: what an operator alerts on without the console (dead letters,
needs-human, alarms by state, fires, viewers), served over plain HTTP next to /ops."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from alarmtop.core import RetryPolicy, VirtualClock
from alarmtop.examples.festival import FestivalServices, build_festival
from alarmtop.server.app import OpsServer
from tests.conftest import RuntimeFactory
from tests.server.conftest import (
    OPERATOR,
    VIEWER,
    Always,
    ClientFactory,
    Quiet,
    ServerFactory,
    until,
)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(server: OpsServer, path: str = "/metrics") -> tuple[int, str, str]:
    """GET path on the server; (status, content type, body)."""
    def get() -> tuple[int, str, str]:
        url = f"http://127.0.0.1:{server.port}{path}"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    return await asyncio.to_thread(get)


def samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, tuple(sorted(labels.items())))]


async def test_fresh_server_reports_zeros(make_runtime: RuntimeFactory,
                                          serve: ServerFactory) -> None:
    """Every series an operator alerts on exists from the start, at zero, in Prometheus
    text format."""
    server = await serve(await make_runtime(Quiet))
    status, ctype, body = await scrape(server)
    assert status == 200 and ctype.startswith("text/plain")
    assert value(body, "alarmtop_dead_letters") == 0
    assert value(body, "alarmtop_needs_human") == 0
    assert value(body, "alarmtop_viewers_connected") == 0
    assert value(body, "alarmtop_alarm_fires_total") == 0
    for state in ("pending", "running", "retrying", "dead"):
        assert value(body, "alarmtop_alarms", state=state) == 0
    assert value(body, "alarmtop_executions", status="needs_human") == 0


async def test_alarms_dead_letters_fires_and_viewers(make_runtime: RuntimeFactory,
                                                     clock: VirtualClock, serve: ServerFactory,
                                                     client: ClientFactory) -> None:
    """After alarms fire: fires, failures, retries and dead letters are counted; alarms
    by state and dead letters are current; connected ops clients are counted."""
    rt = await make_runtime(Always, Quiet,
                            policies={"Always": RetryPolicy(max_retries=1, initial_delay_s=1)})
    server = await serve(rt)
    await rt.get(Always, "a1").arm(0)
    await rt.get(Quiet, "ok").arm(0)
    await rt.get(Quiet, "later").arm(60_000)
    await rt.get(Quiet, "later2").arm(120_000)
    await clock.advance(0)
    await clock.advance(1)
    await client(server.url, VIEWER)
    await client(server.url, OPERATOR)

    _, _, body = await scrape(server)
    assert value(body, "alarmtop_alarms", state="dead") == 1
    assert value(body, "alarmtop_alarms", state="pending") == 2
    assert value(body, "alarmtop_dead_letters") == 1
    assert value(body, "alarmtop_alarm_fires_total") == 3  # a1 twice, ok once
    assert value(body, "alarmtop_alarm_failures_total") == 2
    assert value(body, "alarmtop_alarm_retries_total") == 1
    assert value(body, "alarmtop_alarm_dead_letters_total") == 1
    assert value(body, "alarmtop_alarm_lateness_seconds_count") == 3
    assert value(body, "alarmtop_viewers_connected") == 2

    await rt.rearm(Always, "a1", at_ms=clock.now_ms() + 60_000)
    _, _, body = await scrape(server)
    assert value(body, "alarmtop_dead_letters") == 0
    assert value(body, "alarmtop_alarms", state="pending") == 3


async def test_needs_human(make_runtime: RuntimeFactory, clock: VirtualClock,
                           serve: ServerFactory) -> None:
    """An execution stuck on a failing compensation shows as needs_human = 1 (and by
    status), so "needs_human > 0" can page someone."""
    rt = await make_runtime()
    services = FestivalServices(rt.ledger)
    rt.register_execution(build_festival(services))
    server = await serve(rt)
    await rt.executions.start("festival-stream", {"eventId": "e1"}, execution_id="e1")
    rt.faults.inject("e1", "compensation_fail", step="compensate_open_viewing_page", times=None)
    await clock.advance(0)
    d = await rt.executions.describe("e1")
    (cb,) = [c for c in d["callbacks"] if c["name"] == "verdict"]
    await rt.executions.send_callback_success(cb["callback_id"], "cancel")
    await clock.advance(10)
    assert (await rt.executions.describe("e1"))["status"] == "needs_human"
    _, _, body = await scrape(server)
    assert value(body, "alarmtop_needs_human") == 1
    assert value(body, "alarmtop_executions", status="needs_human") == 1
    assert value(body, "alarmtop_executions", status="succeeded") == 0


async def test_viewer_gauge_follows_disconnects(make_runtime: RuntimeFactory,
                                                serve: ServerFactory,
                                                client: ClientFactory) -> None:
    """A client that leaves is no longer counted."""
    server = await serve(await make_runtime(Quiet))
    c = await client(server.url, VIEWER)
    _, _, body = await scrape(server)
    assert value(body, "alarmtop_viewers_connected") == 1
    await c.ws.close()
    await until(lambda: server.viewers == 0)
    _, _, body = await scrape(server)
    assert value(body, "alarmtop_viewers_connected") == 0


@pytest.mark.parametrize("path", ["/", "/metric", "/metrics/extra", "/favicon.ico"])
async def test_unknown_path_is_404(make_runtime: RuntimeFactory, serve: ServerFactory,
                                   path: str) -> None:
    """Anything but /ops, /objects/... and /metrics is a 404 that names the routes."""
    server = await serve(await make_runtime(Quiet))
    with pytest.raises(urllib.error.HTTPError) as info:
        await scrape(server, path)
    assert info.value.code == 404
    body = info.value.read().decode()
    info.value.close()
    assert "/ops" in body and "/metrics" in body


async def test_query_string_is_ignored(make_runtime: RuntimeFactory,
                                       serve: ServerFactory) -> None:
    """/metrics?x=1 is still the metrics page (scrapers may add parameters)."""
    server = await serve(await make_runtime(Quiet))
    status, _, body = await scrape(server, "/metrics?name[]=alarmtop_needs_human")
    assert status == 200 and "alarmtop_needs_human" in body
