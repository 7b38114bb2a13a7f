"""Prometheus metrics: what an operator alerts on without the console.

Counters and the lateness histogram follow the runtime's events; gauges
(alarms by state, near exhaustion, executions by status, dead letters,
needs-human, objects, viewers) are set at each scrape from the counters storage
keeps with its writes (`Runtime.counters()`): a scrape runs no query, so it costs
the same with a thousand alarms or a million and never waits for, or delays, a
commit.

`/metrics` is open by default (like most exporters, on 127.0.0.1); with a token
(`Metrics.token`, `alarmtop serve --metrics-token-file`), a scrape must send
`Authorization: Bearer <token>` (Prometheus: `authorization: {credentials_file: ...}`).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from alarmtop.core import Event, Runtime

ALARM_STATES = ("pending", "running", "retrying", "dead")
EXECUTION_STATUSES = ("running", "suspended", "succeeded", "failed", "timed_out",
                      "needs_human", "aborted")


class Metrics:
    def __init__(self, runtime: Runtime, token: str | None = None) -> None:
        self.rt = runtime
        self.token = token  # None: scrapes need no token
        self.registry = r = CollectorRegistry()
        self.fires = Counter("alarmtop_alarm_fires_total", "Alarm attempts started", registry=r)
        self.failures = Counter("alarmtop_alarm_failures_total", "Alarm attempts that failed",
                                registry=r)
        self.retries = Counter("alarmtop_alarm_retries_total", "Alarm retries scheduled",
                               registry=r)
        self.deaths = Counter("alarmtop_alarm_dead_letters_total",
                              "Alarms that exhausted their retries", registry=r)
        self.lateness = Histogram(
            "alarmtop_alarm_lateness_seconds", "Start of an attempt after its due time",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30), registry=r)
        self.alarms = Gauge("alarmtop_alarms", "Alarms by state", ["state"], registry=r)
        self.dead_letters = Gauge("alarmtop_dead_letters", "Dead letters waiting for an operator",
                                  registry=r)
        self.near_exhaustion = Gauge("alarmtop_alarms_near_exhaustion",
                                     "Alarms whose next failure makes them dead letters",
                                     registry=r)
        self.executions = Gauge("alarmtop_executions", "Executions by status", ["status"],
                                registry=r)
        self.needs_human = Gauge("alarmtop_needs_human",
                                 "Executions waiting for a human decision", registry=r)
        self.objects = Gauge("alarmtop_objects", "Objects known to the runtime (a database, "
                             "an alarm or an execution)", registry=r)
        self.viewers = Gauge("alarmtop_viewers_connected", "Clients on the ops channel",
                             registry=r)
        self.sockets = Gauge("alarmtop_object_sockets", "Open object WebSockets", registry=r)
        self.relayed = Gauge("alarmtop_relayed_object_sockets",
                             "Object WebSockets whose client is on this node and whose object "
                             "runs on another (which counts them in alarmtop_object_sockets)",
                             registry=r)
        self._unlisten: Callable[[], None] | None = runtime.events.listen(self._on_event)

    def _on_event(self, ev: Event) -> None:
        if ev.type == "alarm.fired":
            self.fires.inc()
            self.lateness.observe(max(0, ev.data.get("lateness_ms", 0)) / 1000)
        elif ev.type == "alarm.failed":
            self.failures.inc()
        elif ev.type == "alarm.retry_scheduled":
            self.retries.inc()
        elif ev.type == "alarm.dead":
            self.deaths.inc()

    def allows(self, headers: Mapping[str, str]) -> bool:
        """Whether a scrape with these request headers may read the metrics."""
        if self.token is None:
            return True
        given = headers.get("Authorization") or ""
        scheme, _, credentials = given.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            credentials.strip().encode(), self.token.encode())

    async def render(self, viewers: int, relayed: int = 0) -> bytes:
        counts = self.rt.counters()
        for state in ALARM_STATES:
            self.alarms.labels(state).set(counts.alarms.get(state, 0))
        self.dead_letters.set(counts.alarms.get("dead", 0))
        self.near_exhaustion.set(self.rt.near_exhaustion(counts))
        for status in EXECUTION_STATUSES:
            self.executions.labels(status).set(counts.executions.get(status, 0))
        self.needs_human.set(counts.executions.get("needs_human", 0))
        self.objects.set(counts.known)
        self.viewers.set(viewers)
        self.sockets.set(self.rt.sockets.total())
        self.relayed.set(relayed)
        return generate_latest(self.registry)

    def close(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
