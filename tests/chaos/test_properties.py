"""Property tests of replay and of the saga stack, on the real runtime.

Hypothesis draws a workflow (steps that fail a number of times, crashes at point
A, B or C of any step, waits between steps), a code change between two
invocations, or a saga whose compensations fail and an operator's answers. Each
example runs on a fresh runtime and `VirtualClock`, and is checked against a
model of what must happen:

- replay after a crash at any point gives the same results, never runs a
  checkpointed step again, and runs each body exactly as often as its failures
  and B-crashes (after the body, before its checkpoint) demand;
- replay that meets another operation than the log has fails at exactly the
  first differing operation, having re-run nothing;
- a saga compensates in exact reverse order of its pushes, skips nothing, stops
  for a human at a compensation that fails for good with the stack showing what
  is done, failed and pending, and never repeats a finished compensation;
- one alarm per object, set, overwritten, deleted, failing and firing in any
  order, behaves exactly like a small model of the documented rules.

(The retry policy and the due window already have their properties in
tests/model/test_policy.py and tests/model/test_window.py.)
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alarmtop.core import AlarmInfo, DurableObject, RetryPolicy, Runtime, VirtualClock, next_delay
from alarmtop.core.durable import (
    DurableContext,
    Duration,
    RetryStrategyConfig,
    StepConfig,
    StepError,
    ValidationError,
    create_retry_strategy,
    durable_execution,
)
from alarmtop.core.kernel.executions.saga import COMPENSATION_CONFIG
from alarmtop.core.model.execution_config import JitterStrategy

START_MS = 1_800_000_000_000
EID = "prop"
ATTEMPTS = 3
RETRY = StepConfig(retry_strategy=create_retry_strategy(RetryStrategyConfig(
    max_attempts=ATTEMPTS, initial_delay=Duration(1), backoff_rate=1.0,
    jitter_strategy=JitterStrategy.NONE)))
COMPENSATION_ATTEMPTS = 3
FINISHED = ("succeeded", "failed", "aborted", "timed_out")
PROPS = settings(max_examples=50, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])

Scenario = Callable[[Runtime, VirtualClock], Awaitable[Any]]


def on_fresh_runtime(scenario: Scenario, *handlers: Any) -> Any:
    """Run `scenario` on a new runtime in a new folder, on a virtual clock."""
    async def main() -> Any:
        with tempfile.TemporaryDirectory() as d:
            clock = VirtualClock(start_ms=START_MS)
            rt = Runtime(Path(d) / "data", clock=clock)
            for h in handlers:
                rt.register_execution(h)
            await rt.start()
            try:
                return await scenario(rt, clock)
            finally:
                await rt.stop()
    return asyncio.run(main())


async def run_until(rt: Runtime, clock: VirtualClock, statuses: tuple[str, ...],
                    limit_s: int = 2000) -> dict[str, Any]:
    """Advance virtual time until the execution reaches one of `statuses`."""
    d = await rt.executions.describe(EID)
    waited = 0
    while d["status"] not in statuses and waited < limit_s:
        await clock.advance(5)
        waited += 5
        d = await rt.executions.describe(EID)
    return d


def events_of(d: dict[str, Any], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [e for e in d["history"] if e["EventType"] == kind
            and (name is None or e.get("Name") == name)]


# -- replay after crashes --------------------------------------------------------------------

@dataclass(frozen=True)
class StepPlan:
    failures: int  # the body raises on its first `failures` runs (>= ATTEMPTS: for good)
    crash_a: bool  # the invocation dies before the body (point A)
    crash_b: bool  # ... after the body, before the checkpoint (point B)
    crash_c: bool  # ... after the checkpoint (point C)
    wait_after: bool  # a durable wait follows the step (a new invocation)

    @property
    def succeeds(self) -> bool:
        return self.failures < ATTEMPTS

    def expected_runs(self) -> int:
        """Body runs: each failure, then one success, plus one again after a B crash."""
        if not self.succeeds:
            return ATTEMPTS
        return self.failures + 1 + int(self.crash_b)

    def expected_crashes(self) -> int:
        """A crash at A happens on the first attempt; B and C only once the body succeeds."""
        return int(self.crash_a) + (int(self.crash_b) + int(self.crash_c) if self.succeeds else 0)


step_plans = st.lists(st.builds(StepPlan, failures=st.integers(0, ATTEMPTS),
                                crash_a=st.booleans(), crash_b=st.booleans(),
                                crash_c=st.booleans(), wait_after=st.booleans()),
                      min_size=1, max_size=5)


@dataclass
class Runs:
    """Every body run, in order: (step index, nonce, ok)."""

    log: list[tuple[int, str, bool]] = field(default_factory=list)

    def of(self, i: int) -> list[tuple[str, bool]]:
        return [(nonce, ok) for j, nonce, ok in self.log if j == i]


def workflow(plans: list[StepPlan], runs: Runs) -> Any:
    def body(i: int) -> Callable[[], str]:
        def run() -> str:
            nonce = uuid.uuid4().hex[:10]
            ok = len(runs.of(i)) >= plans[i].failures
            runs.log.append((i, nonce, ok))
            if not ok:
                raise RuntimeError(f"step s{i} fails by plan")
            return nonce
        return run

    @durable_execution(name="replayed")
    async def replayed(event: Any, ctx: DurableContext) -> list[str]:
        out = []
        for i, plan in enumerate(plans):
            try:
                out.append(await ctx.step(body(i), name=f"s{i}", config=RETRY))
            except StepError:
                out.append("failed")
            if plan.wait_after:
                await ctx.wait(Duration(1))
        return out

    return replayed


@PROPS
@given(plans=step_plans)
def test_replay_after_crashes_never_recomputes_a_checkpoint(plans: list[StepPlan]) -> None:
    runs = Runs()

    async def scenario(rt: Runtime, clock: VirtualClock) -> None:
        for i, plan in enumerate(plans):
            # Injected in the order A, B, C: each applies at the first point it matches.
            for point, wanted in (("A", plan.crash_a), ("B", plan.crash_b), ("C", plan.crash_c)):
                if wanted:
                    rt.faults.inject(EID, "step_crash", step=f"s{i}", point=point)
        await rt.executions.start("replayed", None, execution_id=EID)
        d = await run_until(rt, clock, FINISHED)
        assert d["status"] == "succeeded", (d["status"], d["error"])
        checkpoints = {e["Name"]: json.loads(e["StepSucceededDetails"]["Result"]["Payload"])
                       for e in events_of(d, "StepSucceeded")}
        # The result is exactly what was checkpointed, step by step.
        assert d["result"] == [checkpoints.get(f"s{i}", "failed") for i in range(len(plans))]
        for i, plan in enumerate(plans):
            mine = runs.of(i)
            assert len(mine) == plan.expected_runs(), (i, plan, mine)
            assert len(events_of(d, "StepFailed", f"s{i}")) == min(plan.failures, ATTEMPTS)
            if plan.succeeds:
                # The checkpointed run is the last run: nothing ran after the checkpoint.
                assert mine[-1] == (checkpoints[f"s{i}"], True), (i, mine)
                assert len(events_of(d, "StepSucceeded", f"s{i}")) == 1
            else:
                assert f"s{i}" not in checkpoints and not any(ok for _, ok in mine)
        crashed = [e for e in events_of(d, "InvocationCompleted")
                   if "Error" in e["InvocationCompletedDetails"]]
        assert len(crashed) == sum(p.expected_crashes() for p in plans)
        assert [e["EventId"] for e in d["history"]] == list(range(1, len(d["history"]) + 1))
        # Every crash was used, except B and C of steps whose body never succeeded.
        left = {(f["step"], f["point"]) for f in rt.faults.list()}
        assert left == {(f"s{i}", point) for i, plan in enumerate(plans) if not plan.succeeds
                        for point, wanted in (("B", plan.crash_b), ("C", plan.crash_c))
                        if wanted}

    on_fresh_runtime(scenario, workflow(plans, runs))


# -- replay that meets changed code ----------------------------------------------------------

names = st.lists(st.sampled_from(["a", "b", "c"]), max_size=4)


@PROPS
@given(before=names, after=names, tail=names)
def test_divergence_is_caught_at_the_first_differing_operation(
        before: list[str], after: list[str], tail: list[str]) -> None:
    plan = {"pre": before}
    ran: list[str] = []

    def body(name: str) -> Callable[[], str]:
        def run() -> str:
            ran.append(name)
            return name.upper()
        return run

    @durable_execution(name="changing")
    async def changing(event: Any, ctx: DurableContext) -> list[str]:
        out = [await ctx.step(body(n), name=n) for n in plan["pre"]]
        cb = await ctx.create_callback("go")
        await cb.result()
        out += [await ctx.step(body(n), name=n) for n in tail]
        return out

    async def scenario(rt: Runtime, clock: VirtualClock) -> None:
        await rt.executions.start("changing", None, execution_id=EID)
        d = await run_until(rt, clock, ("suspended",))
        [cb] = d["callbacks"]
        plan["pre"] = after  # the code changed under the running execution
        await rt.executions.send_callback_success(cb["callback_id"], "go")
        d = await run_until(rt, clock, FINISHED)
        logged = [("step", n) for n in before] + [("callback", "go")]
        called = [("step", n) for n in after] + [("callback", "go")]
        diverge = next((i for i, (x, y) in enumerate(zip(logged, called)) if x != y), None)
        if diverge is None:
            assert (d["status"], d["result"]) == ("succeeded", [n.upper() for n in before + tail])
            assert ran == before + tail
        else:
            assert d["status"] == "failed", d
            assert d["error"]["ErrorType"] == "NonDeterministicExecutionError"
            assert f"operation {diverge + 1}:" in d["error"]["ErrorMessage"], d["error"]
            assert ran == before  # nothing re-ran, nothing new ran

    on_fresh_runtime(scenario, changing)


# -- the saga stack --------------------------------------------------------------------------

@dataclass
class SagaModel:
    """What must happen to a stack of `n` compensations failing `fails[i]` runs each,
    when the operator answers each human stop with the next of `answers` (then retry)."""

    n: int
    fails: list[int]
    answers: list[str]
    runs: list[tuple[int, bool]] = field(default_factory=list)
    stops: list[tuple[int, list[str]]] = field(default_factory=list)  # failed index, states
    final: list[str] = field(default_factory=list)

    def play(self) -> None:
        states = ["pending"] * self.n
        answers = list(self.answers)
        left = list(self.fails)
        for i in reversed(range(self.n)):
            while True:
                done = False
                for _ in range(COMPENSATION_ATTEMPTS):
                    ok = left[i] == 0
                    left[i] = max(0, left[i] - 1)
                    self.runs.append((i, ok))
                    if ok:
                        done = True
                        break
                if done:
                    states[i] = "compensated"
                    break
                states[i] = "failed"
                self.stops.append((i, list(reversed(states))))
                answer = answers.pop(0) if answers else "retry"
                if answer == "resolve":
                    states[i] = "resolved"
                    break
        self.final = list(reversed(states))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 5), fails=st.lists(st.integers(0, 7), min_size=5, max_size=5),
       answers=st.lists(st.sampled_from(["retry", "resolve"]), max_size=6))
def test_saga_compensates_in_reverse_skips_nothing_and_stops_for_a_human(
        n: int, fails: list[int], answers: list[str]) -> None:
    model = SagaModel(n, fails[:n], answers)
    model.play()
    runs: list[tuple[int, bool]] = []
    attempts: list[int] = [0] * n

    def compensation(i: int) -> Callable[[], str]:
        def undo() -> str:
            attempts[i] += 1
            ok = attempts[i] > model.fails[i]
            runs.append((i, ok))
            if not ok:
                raise RuntimeError(f"compensation {i} fails by plan")
            return f"undone {i}"
        return undo

    @durable_execution(name="sagas")
    async def sagas(event: Any, ctx: DurableContext) -> list[dict[str, Any]]:
        saga = ctx.saga()
        for i in range(n):
            await ctx.step(lambda i=i: f"did {i}", name=f"s{i}")
            saga.push(f"s{i}", compensation(i))
        assert saga.compensable
        view = await saga.compensate()
        assert not saga.compensable
        try:
            saga.push("late", compensation(0))
        except ValidationError:
            return view
        raise AssertionError("a push after compensation began was accepted")

    async def scenario(rt: Runtime, clock: VirtualClock) -> None:
        await rt.executions.start("sagas", None, execution_id=EID)
        answers = list(model.answers)
        stops: list[tuple[int, list[str]]] = []
        while True:
            d = await run_until(rt, clock, (*FINISHED, "needs_human"))
            if d["status"] != "needs_human":
                break
            states = [s["state"] for s in d["saga"]]
            stops.append((n - 1 - states.index("failed"), states))
            answer = answers.pop(0) if answers else "retry"
            if answer == "resolve":
                await rt.executions.resolve(EID, "undone by hand")
            else:
                await rt.executions.retry_compensation(EID)
            # The decision takes effect at the next invocation, due now.
            await clock.advance(0)
        assert d["status"] == "succeeded", (d["status"], d["error"])
        assert runs == model.runs  # reverse order, every entry, nothing repeated
        assert stops == model.stops
        assert [s["state"] for s in d["result"]] == model.final
        assert [s["name"] for s in d["result"]] == [f"s{i}" for i in reversed(range(n))]
        # Each finished compensation is one checkpoint; none ran after it.
        for i in range(n):
            done = events_of(d, "StepSucceeded", f"compensate_s{i}")
            assert len(done) == (1 if model.final[n - 1 - i] == "compensated" else 0)

    on_fresh_runtime(scenario, sagas)


def test_compensation_retry_budget_is_the_documented_one() -> None:
    """The model above assumes the saga helper's 3 attempts per compensation."""
    strategy = COMPENSATION_CONFIG.retry_strategy
    assert strategy is not None
    decisions = [strategy(RuntimeError("x"), attempt).should_retry for attempt in (1, 2, 3)]
    assert decisions == [True, True, False]


# -- one alarm per object: the runtime against a model ---------------------------------------

ALARM_POLICY = RetryPolicy(max_retries=2, initial_delay_s=1.0, backoff_rate=2.0)
OBJECTS = ["o0", "o1", "o2"]


class Flaky(DurableObject):
    """Its handler fails while the test's budget for it lasts; every run is logged."""

    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def disarm(self) -> None:
        await self.ctx.storage.delete_alarm()

    async def alarm(self, info: AlarmInfo) -> None:
        env = self.env
        ok = env["budget"].get(self.ctx.id, 0) == 0
        if not ok:
            env["budget"][self.ctx.id] -= 1
        env["fires"].setdefault(self.ctx.id, []).append((self.ctx.now_ms(), info.retry_count, ok))
        if not ok:
            raise RuntimeError("fails by plan")


@dataclass
class AlarmModel:
    """The documented rules, for one alarm per object."""

    now: int = START_MS
    alarms: dict[str, dict[str, Any]] = field(default_factory=dict)
    budget: dict[str, int] = field(default_factory=dict)
    fires: dict[str, list[tuple[int, int, bool]]] = field(default_factory=dict)

    def set(self, obj: str, at: int) -> None:
        self.alarms[obj] = {"scheduled": at, "due": at, "retry": 0, "state": "pending"}

    def advance(self, ms: int) -> None:
        target = self.now + ms
        while True:
            due = [a["due"] for a in self.alarms.values() if a["state"] != "dead"]
            if not due or min(due) > target:
                self.now = target
                return
            self.now = min(due)
            for obj in sorted(o for o, a in self.alarms.items()
                              if a["state"] != "dead" and a["due"] == self.now):
                self._fire(obj)

    def _fire(self, obj: str) -> None:
        a = self.alarms[obj]
        ok = self.budget.get(obj, 0) == 0
        if not ok:
            self.budget[obj] -= 1
        self.fires.setdefault(obj, []).append((self.now, a["retry"], ok))
        if ok:
            del self.alarms[obj]
        elif a["retry"] + 1 > ALARM_POLICY.max_retries:
            a.update(state="dead", due=None)
        else:
            delay = next_delay(ALARM_POLICY, a["retry"] + 1)
            a.update(state="retrying", retry=a["retry"] + 1, due=self.now + round(delay * 1000))


alarm_ops = st.lists(st.one_of(
    st.tuples(st.just("set"), st.sampled_from(OBJECTS), st.integers(1, 5000)),
    st.tuples(st.just("delete"), st.sampled_from(OBJECTS)),
    st.tuples(st.just("break"), st.sampled_from(OBJECTS), st.integers(0, 4)),
    st.tuples(st.just("advance"), st.integers(0, 8000)),
), max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=alarm_ops)
def test_one_alarm_per_object_behaves_like_the_model(ops: list[tuple[Any, ...]]) -> None:
    model = AlarmModel()
    fires: dict[str, list[tuple[int, int, bool]]] = {}

    async def main() -> None:
        with tempfile.TemporaryDirectory() as d:
            clock = VirtualClock(start_ms=START_MS)
            rt = Runtime(Path(d) / "data", clock=clock, env={"budget": {}, "fires": fires})
            rt.register(Flaky, retry_policy=ALARM_POLICY)
            await rt.start()
            real_budget = rt.env["budget"]
            try:
                for op in ops:
                    if op[0] == "set":
                        at = clock.now_ms() + op[2]
                        await rt.get(Flaky, op[1]).arm(at)
                        model.set(op[1], at)
                    elif op[0] == "delete":
                        await rt.get(Flaky, op[1]).disarm()
                        model.alarms.pop(op[1], None)
                    elif op[0] == "break":
                        real_budget[op[1]] = op[2]
                        model.budget[op[1]] = op[2]
                    else:
                        await clock.advance(op[1] / 1000)
                        model.advance(op[1])
                        assert clock.now_ms() == model.now
                    assert fires == model.fires, op
                    for obj in OBJECTS:
                        status = await rt.alarm(Flaky, obj)
                        want = model.alarms.get(obj)
                        got = None if status is None else {
                            "scheduled": status.scheduled_ms, "due": status.next_attempt_ms,
                            "retry": status.retry_count, "state": status.state}
                        assert got == want, (obj, op)
                        if want is not None and want["state"] == "dead":
                            assert len(status.attempts) == ALARM_POLICY.max_retries + 1
            finally:
                await rt.stop()

    asyncio.run(main())
