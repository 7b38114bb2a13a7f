"""Prometheus metrics: what an operator alerts on without the console.

Counters and the lateness histogram follow the runtime's events; gauges
(alarms by state, executions by status, dead letters, needs-human, viewers) are
read fresh at each scrape.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from alarmtop.core import Event, Runtime


class Metrics:
    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
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
        self.executions = Gauge("alarmtop_executions", "Executions by status", ["status"],
                                registry=r)
        self.needs_human = Gauge("alarmtop_needs_human",
                                 "Executions waiting for a human decision", registry=r)
        self.viewers = Gauge("alarmtop_viewers_connected", "Clients on the ops channel",
                             registry=r)
        self.sockets = Gauge("alarmtop_object_sockets", "Open object WebSockets", registry=r)
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

    async def render(self, viewers: int) -> bytes:
        counts = await self.rt.alarm_counts()
        for state, n in counts.items():
            self.alarms.labels(state).set(n)
        self.dead_letters.set(counts.get("dead", 0))
        executions = await self.rt.executions.counts()
        for status in ("running", "suspended", "succeeded", "failed", "timed_out",
                       "needs_human", "aborted"):
            self.executions.labels(status).set(executions.get(status, 0))
        self.needs_human.set(executions.get("needs_human", 0))
        self.viewers.set(viewers)
        self.sockets.set(self.rt.sockets.total())
        return generate_latest(self.registry)

    def close(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
