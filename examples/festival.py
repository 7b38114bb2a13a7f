"""The festival live-stream saga.

Reserve streaming capacity, open the viewing page, notify partners, then wait
for the organiser's verdict, raced against the start time. "go" passes the pivot
and starts streaming; "cancel" (or no verdict by the start time) records the
cancellation and compensates in reverse: partners get a cancellation notice, the
page closes, the capacity is released. A compensation that keeps failing hands
the execution to a human instead of leaving things half undone.

The outside world is `FestivalServices`; partner notices go through the
runtime's idempotency ledger keyed by the step, so a notice re-sent after a
crash is delivered once. A partner API that stays down fails the notice for
good (three tries, two seconds apart) and with it the execution; once the
partners are back, an operator redrives it: the capacity and the page are
kept, the notice is sent, and the saga goes on to wait for its verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from alarmtop.core.durable import (
    CallbackConfig,
    CallbackTimeoutError,
    DurableContext,
    DurableFunction,
    Duration,
    Ledger,
    RetryPresets,
    StepConfig,
    durable_execution,
)

# A partner API outage outlasts a few tries: the notice then fails for good, and the
# execution waits for an operator's redrive rather than retrying for minutes.
NOTIFY_CONFIG = StepConfig(retry_strategy=RetryPresets.fixed(Duration(2), max_attempts=3))


@dataclass
class FestivalServices:
    """The systems the saga talks to; each call is logged so tests can count effects."""

    ledger: Ledger
    calls: list[tuple[str, str]] = field(default_factory=list)
    delivered: list[str] = field(default_factory=list)

    async def reserve_streaming(self, event_id: str) -> str:
        self.calls.append(("reserve_streaming", event_id))
        return f"stream-{event_id}"

    async def release_streaming(self, event_id: str) -> None:
        self.calls.append(("release_streaming", event_id))

    async def open_viewing_page(self, event_id: str) -> str:
        self.calls.append(("open_viewing_page", event_id))
        return f"https://watch.example/{event_id}"

    async def close_viewing_page(self, event_id: str) -> None:
        self.calls.append(("close_viewing_page", event_id))

    async def notify_partners(self, key: str, message: str) -> bool:
        """Send a notice; the partners' side drops one it has seen (same key)."""
        self.calls.append(("notify_partners", message))
        first = await self.ledger.deliver(key, message)
        if first:
            self.delivered.append(message)
        return first

    async def record_cancellation(self, event_id: str, reason: str) -> None:
        self.calls.append(("record_cancellation", f"{event_id}: {reason}"))

    async def start_streaming(self, event_id: str) -> None:
        self.calls.append(("start_streaming", event_id))


def build_festival(services: FestivalServices, name: str = "festival-stream",
                   version: str = "1") -> DurableFunction:
    """The durable handler, bound to `services`."""

    @durable_execution(name=name, version=version)
    async def festival(event: dict[str, Any], ctx: DurableContext) -> dict[str, Any]:
        event_id = str(event["eventId"])
        starts_in = int(event.get("startsInSeconds", 3600))
        saga = ctx.saga()

        await ctx.step(services.reserve_streaming, event_id, name="reserve_streaming")
        saga.push("reserve_streaming", services.release_streaming, event_id)

        await ctx.step(services.open_viewing_page, event_id, name="open_viewing_page")
        saga.push("open_viewing_page", services.close_viewing_page, event_id)

        async def notify(message: str) -> bool:
            return await services.notify_partners(ctx.idempotency_key("notice"), message)

        await ctx.step(notify, f"{event_id} goes live", name="notify_partners",
                       config=NOTIFY_CONFIG)
        saga.push("notify_partners", notify, f"{event_id} is cancelled")

        verdict_cb = await ctx.create_callback(
            "verdict", CallbackConfig(timeout=Duration(starts_in)))
        try:
            verdict = await verdict_cb.result()
        except CallbackTimeoutError:
            verdict = "no verdict before the start"
        if verdict == "go":
            saga.pivot()
            await ctx.step(services.start_streaming, event_id, name="start_streaming")
            return {"status": "streaming", "event": event_id}

        await ctx.step(services.record_cancellation, event_id, str(verdict),
                       name="record_cancellation")
        stack = await saga.compensate()
        return {"status": "cancelled", "event": event_id, "verdict": verdict, "saga": stack}

    return festival
