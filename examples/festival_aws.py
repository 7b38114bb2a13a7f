"""The festival live-stream saga, written with AWS's own SDK and run on alarmtop.

The same story as `festival.py`, as a team that writes AWS Lambda durable
functions writes it (`aws-durable-execution-sdk-python`, synchronous, unchanged
on alarmtop): reserve streaming capacity, open the viewing page, notify partners,
then wait for the organiser's verdict (a callback, raced against the start time).
"go" starts the stream; "cancel" (or no verdict in time) records the
cancellation and compensates in reverse, each compensation a step of its own.

The SDK has no saga helper, so this one is a few lines here (`Saga`). A
compensation that still fails after its retries does not undo the rollback and
does not end the execution: it waits on a human-decision callback
(`decide_<name>`), answered from the console (`c` on the execution, or the
`send_callback` ops command) with a JSON decision:

    {"action": "retry"}                     run the compensation again
    {"action": "resolve", "note": "..."}    it was done by hand; carry on
    {"action": "abort", "note": "..."}      stop here: the execution fails

Try it (needs `pip install 'alarmtop[aws]'`)::

    python -m alarmtop.examples.festival_aws ./festival-data
    alarmtop serve --app alarmtop.examples.festival_aws:app --data-dir ./festival-data

The first command starts day 2, whose viewing page will not close, cancels it, and
stops once the saga waits for a human; the second serves it: open the console, find
`hsf-day2` waiting on `decide_open_viewing_page`, and answer it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aws_durable_execution_sdk_python import DurableContext, StepContext, durable_execution
from aws_durable_execution_sdk_python.config import (
    CallbackConfig,
    Duration,
    StepConfig,
)
from aws_durable_execution_sdk_python.exceptions import CallbackError, StepError
from aws_durable_execution_sdk_python.retries import RetryStrategyConfig, create_retry_strategy

from alarmtop.core import Runtime

FUNCTION = "festival-aws"
# A compensation is tried three times, one second apart, before a human is asked.
COMPENSATION = StepConfig(retry_strategy=create_retry_strategy(RetryStrategyConfig(
    max_attempts=3, initial_delay=Duration.from_seconds(1), max_delay=Duration.from_seconds(1),
    backoff_rate=1)))


@dataclass
class FestivalServices:
    """The systems the saga talks to (thread-safe enough for one execution at a time);
    each call is logged, and `broken` names the calls that fail."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    broken: set[str] = field(default_factory=set)
    delivered: set[str] = field(default_factory=set)  # notices the partners have seen

    def _call(self, what: str, arg: str) -> None:
        self.calls.append((what, arg))
        if what in self.broken:
            raise RuntimeError(f"{what} failed for {arg}")

    def reserve_streaming(self, event_id: str) -> str:
        self._call("reserve_streaming", event_id)
        return f"stream-{event_id}"

    def release_streaming(self, event_id: str) -> None:
        self._call("release_streaming", event_id)

    def open_viewing_page(self, event_id: str) -> str:
        self._call("open_viewing_page", event_id)
        return f"https://watch.example/{event_id}"

    def close_viewing_page(self, event_id: str) -> None:
        self._call("close_viewing_page", event_id)

    def notify_partners(self, key: str, message: str) -> bool:
        """Send a notice; the partners drop one they have seen (same key)."""
        self._call("notify_partners", message)
        first = key not in self.delivered
        self.delivered.add(key)
        return first

    def record_cancellation(self, event_id: str, reason: str) -> None:
        self._call("record_cancellation", f"{event_id}: {reason}")

    def start_streaming(self, event_id: str) -> None:
        self._call("start_streaming", event_id)


class Saga:
    """A compensation stack for SDK handlers: push after a step succeeded; `compensate`
    undoes in reverse, each undo a step (`compensate_<name>`), and asks a human
    (`decide_<name>`, a callback) about one that keeps failing."""

    def __init__(self, context: DurableContext) -> None:
        self.context = context
        self.stack: list[tuple[str, Callable[[], Any]]] = []
        self.states: dict[str, str] = {}

    def push(self, name: str, undo: Callable[[], Any]) -> None:
        self.stack.append((name, undo))
        self.states[name] = "pending"

    def compensate(self) -> list[dict[str, str]]:
        for name, undo in reversed(self.stack):
            self.states[name] = self._undo(name, undo)
        return [{"name": n, "state": self.states[n]} for n, _ in self.stack]

    def _undo(self, name: str, undo: Callable[[], Any]) -> str:
        for round_ in range(1, 100):
            step = f"compensate_{name}" + ("" if round_ == 1 else f"_{round_}")
            try:
                self.context.step(lambda _: undo(), name=step, config=COMPENSATION)
                return "compensated"
            except StepError as exc:
                decision = self._ask(name, round_, exc)
            if decision.get("action") == "resolve":
                return "resolved"
            if decision.get("action") == "abort":
                raise RuntimeError(f"aborted while compensating {name}: "
                                   f"{decision.get('note', '')}")
        raise RuntimeError(f"gave up compensating {name}")

    def _ask(self, name: str, round_: int, error: StepError) -> dict[str, Any]:
        """Wait for a human's decision (a callback answered from the console)."""
        callback = self.context.create_callback(
            name=f"decide_{name}" + ("" if round_ == 1 else f"_{round_}"),
            config=CallbackConfig(timeout=Duration.from_days(7)))
        try:
            answer = callback.result()
        except CallbackError as exc:
            return {"action": "abort", "note": f"no decision: {exc}"}
        decision = json.loads(answer) if isinstance(answer, str) else answer
        return decision if isinstance(decision, dict) else {"action": str(decision)}


def build_festival(services: FestivalServices) -> Callable[..., Any]:
    """The durable handler (AWS's SDK), bound to `services`."""

    @durable_execution
    def festival(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
        event_id = str(event["eventId"])
        starts_in = int(event.get("startsInSeconds", 3600))
        arn = context.execution_context.durable_execution_arn
        saga = Saga(context)

        context.step(lambda _: services.reserve_streaming(event_id), name="reserve_streaming")
        saga.push("reserve_streaming", lambda: services.release_streaming(event_id))
        context.step(lambda _: services.open_viewing_page(event_id), name="open_viewing_page")
        saga.push("open_viewing_page", lambda: services.close_viewing_page(event_id))

        def notify(message: str, key: str) -> Callable[[StepContext], bool]:
            return lambda _: services.notify_partners(f"{arn}/{key}", message)
        context.step(notify(f"{event_id} goes live", "live"), name="notify_partners")
        saga.push("notify_partners",
                  lambda: services.notify_partners(f"{arn}/cancel", f"{event_id} is cancelled"))

        verdict_cb = context.create_callback(
            name="verdict", config=CallbackConfig(timeout=Duration.from_seconds(starts_in)))
        try:
            verdict = verdict_cb.result()
        except CallbackError:
            verdict = "no verdict before the start"
        if verdict == "go":
            context.step(lambda _: services.start_streaming(event_id), name="start_streaming")
            return {"status": "streaming", "event": event_id}

        context.step(lambda _: services.record_cancellation(event_id, str(verdict)),
                     name="record_cancellation")
        return {"status": "cancelled", "event": event_id, "verdict": verdict,
                "saga": saga.compensate()}

    return festival


SERVICES = FestivalServices()


def app(data_dir: Path) -> Runtime:
    """For `alarmtop serve --app alarmtop.examples.festival_aws:app`."""
    rt = Runtime(data_dir)
    rt.register_lambda(FUNCTION, build_festival(SERVICES))
    return rt


async def _first_act(data_dir: Path) -> None:
    """Start day 2 with a viewing page that will not close, cancel it, stop once the
    saga waits for a human."""
    SERVICES.broken.add("close_viewing_page")
    rt = app(data_dir)
    async with rt:
        await rt.executions.start(FUNCTION, {"eventId": "hsf-day2"}, execution_id="hsf-day2")
        verdict = await _callback(rt, "hsf-day2", "verdict")
        await rt.executions.send_callback_success(verdict, "cancel")
        decide = await _callback(rt, "hsf-day2", "decide_open_viewing_page", wait_s=30)
        print(f"hsf-day2 waits for a human: callback {decide}\n"
              f"serve it: alarmtop serve --app alarmtop.examples.festival_aws:app "
              f"--data-dir {data_dir}")


async def _callback(rt: Runtime, execution_id: str, name: str, wait_s: float = 5) -> str:
    for _ in range(int(wait_s / 0.05)):
        d = await rt.executions.describe(execution_id)
        for cb in d["callbacks"]:
            if cb["name"] == name and cb["status"] == "started":
                return str(cb["callback_id"])
        await asyncio.sleep(0.05)  # the execution runs meanwhile; this only looks
    raise SystemExit(f"{execution_id} never waited on {name!r}")


if __name__ == "__main__":
    asyncio.run(_first_act(Path(sys.argv[1] if len(sys.argv) > 1 else "./festival-data")))
