"""Durable steps through AWS's real SDK: alarmtop against AWS's own local runner and DBOS.

One handler, written with `aws-durable-execution-sdk-python` as a team writes it for
AWS Lambda: `@durable_execution`, 10 `context.step` calls in a row, each a trivial
`def` (x -> x + 1) whose result the SDK checkpoints before the next step starts.
It runs unchanged on:

- `alarmtop`: in-process through `rt.register_lambda(...)` (worker threads), on
  `SystemClock`, embedded SQLite in WAL with synchronous=FULL (read back in every
  run). Each checkpoint is one event of the execution's object, committed (fsync'd)
  before the SDK gets its answer. Done when `execution.succeeded` is emitted.
- `aws-local`: AWS's own local runner, `DurableFunctionTestRunner` from
  `aws-durable-execution-sdk-python-testing`, as its documentation has it: the
  in-memory store, invocations in its own thread pool. Nothing is durable.
- `dbos-wal`: DBOS (no SDK: its own API) with the same work, a `def` workflow of 10
  `@DBOS.step()` calls, each step's output committed before it returns, on SQLite
  in WAL with synchronous=FULL (alarmtop's settings; `dbos`: as DBOS creates the
  file, rollback journal). The workflow function is called in the driving thread,
  as a synchronous DBOS application calls it.
- `sdk-alone`: the handler against a service that answers every call at once and
  keeps nothing: what the SDK itself costs (its client side, with the step bodies),
  the floor under every service of the SDK. Not a peer: the split below uses it.

Modes: `seq` (one execution at a time, started and awaited) and `c50` (50 in
flight: 50 started at once, a new one as each ends; `cN` for N). Reported: steps/s,
the in-handler time per step, process CPU per step (all threads), the CPU of the
service's own threads (alarmtop's event loop and database threads, the runner's
scheduler), peak RSS. Then where the CPU goes: each system's CPU per step less the
SDK's own (`sdk-alone`, measured apart in the same rounds) is its service side.

Mind the SDK's own pace: an invocation ends only when the SDK's checkpoint thread
notices it should stop, which it polls for every 100 ms; a sequential execution of
10 steps takes at least that long on any service (`sdk-alone` shows it), so the
sequential rate is the SDK's, and CPU per step is the figure that compares services.

Repeats are interleaved (round i runs every system once); each ratio is the median
of the per-round ratios, with their min-max. Bars: alarmtop within 2x of
`aws-local` sequentially (ratio >= 0.5) and ahead of it at 50 in flight (>= 1).
`--profile out.html`: pyinstrument on alarmtop's event loop thread (the service
side; the SDK's threads are not in it) for one run of the first mode.

Needs the `aws` extra and, for `aws-local` and DBOS, the `bench` extra (it brings
`aws-durable-execution-sdk-python-testing` and `dbos`).

    .venv/bin/python bench/aws_steps.py [--quick] [--repeats 3] [--modes seq,c50]
        [--systems alarmtop,aws-local,dbos-wal,sdk-alone,dbos] [--executions N]
        [--profile out.html]

Full (the default systems, seq and c50): about 8 min on 2 shared cores at a load of
10-14 (--quick: about 3 min).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import resource
import statistics
import sys
import threading
import time
from array import array
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import (
    Profiling,
    Ratios,
    Table,
    alarmtop_sqlite_settings,
    base_parser,
    emit_child,
    fsync_rate,
    machine,
    paired_ratio,
    peak_rss_mb,
    print_config,
    rounds,
    run_child,
    version_of,
    work_area,
    write_json,
)

STEPS = 10
SYSTEMS = ("alarmtop", "aws-local", "dbos-wal", "sdk-alone", "dbos")
DEFAULT = ("alarmtop", "aws-local", "dbos-wal", "sdk-alone")
PEERS = ("aws-local", "dbos-wal", "dbos")
# The bars (alarmtop / aws-local, steps/s) by mode: within 2x sequentially, ahead at 50.
BARS = {"seq": 0.5, "c50": 1.0}
WARMUP = 3  # executions run before timing starts, sequentially
# Threads of each system that are its service's own (parts of their names), CPU read apart.
SERVICE_THREADS: dict[str, dict[str, tuple[str, ...]]] = {
    "alarmtop": {"event loop thread": ("MainThread",),
                 "database threads": ("runtime-db",)},  # the writer and the reader
    "aws-local": {"runner's scheduler threads": ("durable-scheduler", "(_start_loop)")},
}
spans = array("d")  # in-handler seconds for the 10 steps, one per execution


def mode_size(mode: str, quick: bool, executions: int | None = None) -> tuple[int, int]:
    """(executions, in flight) of a mode: `seq`, or `cN` for N in flight (500 or 2N
    executions, --quick 2N, so that ramp-up and the tail weigh less)."""
    if mode == "seq":
        return executions or (30 if quick else 200), 1
    conc = int(mode.removeprefix("c"))
    return executions or (2 * conc if quick else max(2 * conc, 500)), conc


# -- the handler, as written for AWS Lambda ----------------------------------------------


def make_handler() -> Callable[..., Any]:
    """The user's handler: the SDK imported only here (the script runs DBOS without it)."""
    from aws_durable_execution_sdk_python import DurableContext, durable_execution

    def inc(x: int) -> Callable[[Any], int]:
        return lambda _step_context: x + 1

    @durable_execution
    def ten_steps(event: Any, context: DurableContext) -> int:
        t = time.perf_counter()
        x = int(event)
        for i in range(STEPS):
            x = context.step(inc(x), name=f"s{i}")
        spans.append(time.perf_counter() - t)
        return x

    return ten_steps  # type: ignore[no-any-return]


def run_many(n: int, conc: int, one: Callable[[int], None]) -> None:
    """Executions 0..n-1 by a blocking `one(i)`: in turn, or `conc` at once from driving
    threads (the SDK, the runner and DBOS are synchronous)."""
    if conc <= 1:
        for i in range(n):
            one(i)
        return
    with ThreadPoolExecutor(conc, thread_name_prefix="bench-driver") as pool:
        for _ in pool.map(one, range(n)):
            pass


# -- the systems ------------------------------------------------------------------------


class Alarmtop:
    """alarmtop's runtime with the handler registered by `register_lambda`."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.settings: dict[str, Any] = {}

    async def setup(self) -> None:
        from alarmtop.core import Event, Runtime, SystemClock

        self.rt = rt = Runtime(self.data, clock=SystemClock())
        rt.register_lambda("ten-steps", make_handler())
        await rt.start()
        self.settings = await alarmtop_sqlite_settings(rt)
        self.loop = asyncio.get_running_loop()
        self.waiting: dict[str, asyncio.Future[str]] = {}

        def on_event(event: Event) -> None:
            if event.type in ("execution.succeeded", "execution.failed"):
                fut = self.waiting.pop(event.data["execution_id"], None)
                if fut is not None:
                    fut.set_result(event.type)

        rt.events.listen(on_event)

    async def one(self, i: int) -> None:
        eid = f"e{i}"  # a DurableExecutionName (warm-ups are e-1, e-2, ...)
        fut = self.waiting[eid] = self.loop.create_future()
        await self.rt.executions.start("ten-steps", 0, execution_id=eid)
        if await fut != "execution.succeeded":
            raise SystemExit(f"execution {eid} failed: {await self.rt.executions.describe(eid)}")

    async def run_many(self, n: int, conc: int) -> None:
        if conc <= 1:
            for i in range(n):
                await self.one(i)
            return
        sem = asyncio.Semaphore(conc)

        async def guarded(i: int) -> None:
            async with sem:
                await self.one(i)
        await asyncio.gather(*(guarded(i) for i in range(n)))

    async def close(self) -> None:
        d = await self.rt.executions.describe("e0")
        await self.rt.stop()
        if (d["status"], d["result"]) != ("succeeded", STEPS):
            raise SystemExit(f"alarmtop: the handler ended {d['status']} with "
                             f"{d['result']!r}, not {STEPS}")


class AwsLocal:
    """AWS's `DurableFunctionTestRunner`, as its documentation sets it up (in memory)."""

    def __init__(self) -> None:
        try:
            from aws_durable_execution_sdk_python_testing.runner import (
                DurableFunctionTestRunner,
            )
        except ImportError:
            raise SystemExit("aws-local needs AWS's testing package: pip install -e "
                             "'.[bench]' (aws-durable-execution-sdk-python-testing)") from None
        self.runner = DurableFunctionTestRunner(make_handler())
        store = type(self.runner._store).__name__  # read only: no public handle
        self.settings = {"store": store, "version": version_of(
            "aws-durable-execution-sdk-python-testing")}
        if store != "InMemoryExecutionStore":
            raise SystemExit(f"the runner should keep its executions in memory, not {store}")

    def one(self, i: int) -> None:
        result = self.runner.run(input="0", execution_name=f"e{i}")
        value = json.loads(result.result) if isinstance(result.result, str) else result.result
        if str(result.status.value) != "SUCCEEDED" or value != STEPS:
            raise SystemExit(f"aws-local: the handler ended {result.status} with {value!r}")

    def close(self) -> None:
        self.runner.close()


class SdkAlone:
    """The handler against a service that answers at once and keeps nothing."""

    def __init__(self) -> None:
        from aws_durable_execution_sdk_python.execution import (
            DurableExecutionInvocationInput,
            DurableExecutionInvocationInputWithClient,
        )
        from aws_durable_execution_sdk_python.lambda_service import (
            CheckpointOutput,
            CheckpointUpdatedExecutionState,
            StateOutput,
        )

        tokens = itertools.count()

        class NoService:
            """The SDK's `DurableServiceClient`, answering with a fresh token and nothing."""

            def checkpoint(self, durable_execution_arn: str, checkpoint_token: str,
                           updates: list[Any], client_token: str | None) -> Any:
                return CheckpointOutput(
                    checkpoint_token=f"t{next(tokens)}",
                    new_execution_state=CheckpointUpdatedExecutionState(
                        operations=[], next_marker=None))

            def get_execution_state(self, durable_execution_arn: str, checkpoint_token: str,
                                    next_marker: str, max_items: int = 1000) -> Any:
                return StateOutput(operations=[], next_marker=None)

        client = NoService()
        self.handler = make_handler()
        self.context = LambdaContext()

        def event(i: int) -> Any:
            run = f"{i:08x}-0000-4000-8000-000000000000"
            payload = {
                "DurableExecutionArn": "arn:aws:lambda:us-east-1:000000000000:function:"
                                       f"ten-steps:$LATEST/durable-execution/e{i}/{run}",
                "CheckpointToken": "t",
                "InitialExecutionState": {"Operations": [{
                    "Id": run, "Type": "EXECUTION", "Status": "STARTED",
                    "StartTimestamp": int(time.time() * 1000),
                    "ExecutionDetails": {"InputPayload": "0"}}], "NextMarker": None}}
            plain = DurableExecutionInvocationInput.from_json_dict(payload)
            return DurableExecutionInvocationInputWithClient \
                .from_durable_execution_invocation_input(plain, client)

        self.event = event
        self.settings = {"service": "answers at once, keeps nothing"}

    def one(self, i: int) -> None:
        out = self.handler(self.event(i), self.context)
        if out.get("Status") != "SUCCEEDED" or json.loads(out["Result"]) != STEPS:
            raise SystemExit(f"sdk-alone: the handler answered {out}")

    def close(self) -> None:
        pass


class LambdaContext:
    """What a Lambda handler's `context` offers (the SDK reads little of it)."""

    function_name = "ten-steps"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:ten-steps"
    memory_limit_in_mb = 128
    aws_request_id = "bench"
    log_group_name = "/aws/lambda/ten-steps"
    log_stream_name = "bench"
    tenant_id = None

    def get_remaining_time_in_millis(self) -> int:
        return 900_000


class Dbos:
    """DBOS on a SQLite system database, the same ten `def` steps in a `def` workflow."""

    def __init__(self, data: Path, journal: str) -> None:
        import peer_dbos
        from dbos import DBOS

        @DBOS.step()
        def inc(x: int) -> int:
            return x + 1

        @DBOS.workflow()
        def ten_steps(x: int) -> int:
            t = time.perf_counter()
            for _ in range(STEPS):
                x = inc(x)
            spans.append(time.perf_counter() - t)
            return x

        self.workflow = ten_steps
        peer_dbos.launch(data / "dbos.sqlite", journal)
        self.settings = peer_dbos.engine_settings()
        expect = {"journal_mode": "wal" if journal == "wal" else "delete",
                  "synchronous": "FULL"}
        if self.settings != expect:
            raise SystemExit(f"DBOS's system database should have {expect}, has "
                             f"{self.settings}")

    def one(self, i: int) -> None:
        if self.workflow(0) != STEPS:
            raise SystemExit("DBOS: the workflow returned a wrong result")

    def close(self) -> None:
        import peer_dbos
        peer_dbos.destroy()


# -- one measured run, in a child process ---------------------------------------------


def thread_cpu_s(native_id: int) -> float | None:
    """CPU seconds of thread `native_id` of this process (Linux: a thread's CPU clock id
    is made from its id, as glibc's pthread_getcpuclockid makes it); None once it ended."""
    try:
        return time.clock_gettime(((~native_id) << 3) | 6)
    except OSError:
        return None


def threads_cpu() -> dict[tuple[int, str], float]:
    """CPU seconds of each live thread, by (id, name)."""
    out = {}
    for t in threading.enumerate():
        if t.native_id is not None and (cpu := thread_cpu_s(t.native_id)) is not None:
            out[(t.native_id, t.name)] = cpu
    return out


class Measure:
    """Wall-clock, process CPU and the CPU of named threads, from `start()` to `stop()`."""

    def __init__(self, system: str, prof: Profiling) -> None:
        self.roles = SERVICE_THREADS.get(system, {})
        self.prof = prof

    def start(self) -> None:
        spans[:] = array("d")
        self.prof.start()
        self.threads0 = threads_cpu()
        self.cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        self.t0 = time.perf_counter()

    def stop(self, n: int) -> dict[str, Any]:
        elapsed = time.perf_counter() - self.t0
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        threads1 = threads_cpu()
        self.prof.stop()
        cpu_s = (cpu1.ru_utime - self.cpu0.ru_utime) + (cpu1.ru_stime - self.cpu0.ru_stime)
        steps = n * STEPS
        by_role = {role: 0.0 for role in self.roles}
        for key, cpu in threads1.items():
            for role, prefixes in self.roles.items():
                if any(part in key[1] for part in prefixes):
                    by_role[role] += cpu - self.threads0.get(key, 0.0)
        return {
            "exec_per_s": n / elapsed,
            "steps_per_s": steps / elapsed,
            "elapsed_s": elapsed,
            "step_ms": statistics.median(spans) / STEPS * 1000 if spans else None,
            "cpu_us": cpu_s / steps * 1e6,
            **{f"cpu_us:{role}": s / steps * 1e6 for role, s in by_role.items()},
            "peak_rss_mb": peak_rss_mb(),
        }


async def alarmtop_run(opts: dict[str, Any], measure: Measure) -> dict[str, Any]:
    sut = Alarmtop(Path(opts["dir"]))
    await sut.setup()
    for i in range(opts.get("warmup", 0)):  # not counted: imports, first-use caches
        await sut.one(-1 - i)
    measure.start()
    await sut.run_many(opts["n"], opts["conc"])
    result = measure.stop(opts["n"])
    await sut.close()
    return {**result, "settings": sut.settings}


def blocking_run(opts: dict[str, Any], measure: Measure) -> dict[str, Any]:
    system = opts["system"]
    sut: AwsLocal | SdkAlone | Dbos
    if system == "aws-local":
        sut = AwsLocal()
    elif system == "sdk-alone":
        sut = SdkAlone()
    else:
        sut = Dbos(Path(opts["dir"]), "wal" if system == "dbos-wal" else "default")
    try:
        for i in range(opts.get("warmup", 0)):
            sut.one(-1 - i)
        measure.start()
        run_many(opts["n"], opts["conc"], sut.one)
        result = measure.stop(opts["n"])
    finally:
        sut.close()
    return {**result, "settings": sut.settings}


def child(opts: dict[str, Any]) -> None:
    measure = Measure(opts["system"], Profiling(opts.pop("profile", None)))
    if opts["system"] == "alarmtop":
        emit_child(asyncio.run(alarmtop_run(opts, measure)))
    else:
        emit_child(blocking_run(opts, measure))


UNITS = {"exec_per_s": "/s", "steps_per_s": "/s", "elapsed_s": "s", "step_ms": "ms",
         "cpu_us": "us", "peak_rss_mb": "MiB"}
LABELS = {
    "exec_per_s": "executions/s",
    "steps_per_s": "steps/s",
    "elapsed_s": "elapsed",
    "step_ms": "in-handler time per step (median exec)",
    "cpu_us": "process CPU per step (all threads)",
    "peak_rss_mb": "peak RSS",
}


def label_of(key: str) -> tuple[str, str]:
    if key.startswith("cpu_us:"):
        return f"  of which CPU of its {key.removeprefix('cpu_us:')}", "us"
    return LABELS[key], UNITS[key]


class Runner:
    """Runs one system in one mode in a fresh process, on a fresh data dir."""

    def __init__(self, args: Any) -> None:
        self.args = args
        self.settings: dict[str, Any] = {}

    def run(self, system: str, n: int, conc: int, table: Table,
            profile: str | None = None) -> None:
        with work_area(self.args.dir, "aws-steps-") as root:
            opts = {"dir": str(root / "data"), "system": system, "n": n, "conc": conc,
                    "profile": profile, "warmup": WARMUP}
            result = run_child(__file__, ["--child", json.dumps(opts)])
        self.settings[system] = result.pop("settings")
        for key, value in result.items():
            label, unit = label_of(key)
            table.add(label, value, unit)
        print(f"  {table.title}: {result['steps_per_s']:,.0f} steps/s, "
              f"{result['cpu_us']:.0f} us CPU/step", file=sys.stderr)


def ratios_of(results: dict[tuple[str, str], Table], modes: list[str]) -> Ratios:
    """alarmtop against each peer; the SDK alone is not a peer (its share is in the
    split printed before)."""
    ratios = Ratios("durable steps through the AWS SDK, alarmtop / peer, the same handler")
    steps, cpu = LABELS["steps_per_s"], LABELS["cpu_us"]
    for mode in modes:
        at = results.get(("alarmtop", mode))
        for peer in PEERS:
            other = results.get((peer, mode))
            if at is None or other is None:
                continue
            name = f"{mode}: alarmtop / {peer}"
            ratios.add(f"{name} steps/s", paired_ratio(at.rows[steps], other.rows[steps]),
                       bar=BARS.get(mode) if peer == "aws-local" else None)
            ratios.add(f"{name} CPU/step", paired_ratio(at.rows[cpu], other.rows[cpu],
                                                        higher_is_better=False))
    return ratios


def where_the_cpu_goes(results: dict[tuple[str, str], Table], modes: list[str]
                       ) -> list[dict[str, Any]]:
    """Each system's CPU per step split into the SDK's own (`sdk-alone`, same mode) and
    the rest: its service side (for DBOS, which has no SDK, all of it)."""
    rows = []
    cpu = LABELS["cpu_us"]
    print("\n== where the CPU goes (medians, us of CPU per step, all threads)")
    print("   the SDK's own: `sdk-alone` in the same mode (the SDK's client side and the "
          "step bodies,\n   with a service that answers at once); the service side: the "
          "rest")
    for mode in modes:
        sdk = results.get(("sdk-alone", mode))
        sdk_us = sdk.median(cpu) if sdk else None
        print(f"\n   {mode}:")
        print(f"   {'system':<12}{'CPU/step':>10}{'the SDK':>10}{'service':>10}  "
              "of which its own threads")
        for (system, m), table in results.items():
            total = table.median(cpu)
            if m != mode or system == "sdk-alone" or total is None:
                continue
            own = sdk_us if system in ("alarmtop", "aws-local") else 0.0
            service = total - own if own is not None else None
            threads = ", ".join(
                f"{name.removeprefix('  of which CPU of its ')} {table.median(name) or 0:.0f}"
                for name in table.rows if name.startswith("  of which"))
            print(f"   {system:<12}{total:>10.0f}"
                  f"{'-' if own is None else f'{own:.0f}':>10}"
                  f"{'-' if service is None else f'{service:.0f}':>10}  {threads}")
            rows.append({"mode": mode, "system": system, "cpu_us": total, "sdk_us": own,
                         "service_us": service})
        if sdk_us is not None:
            print(f"   {'sdk-alone':<12}{sdk_us:>10.0f}{sdk_us:>10.0f}{0:>10}")
    sys.stdout.flush()
    return rows


def config(args: Any, systems: list[str], modes: list[str]) -> dict[str, Any]:
    described = {
        "alarmtop": "register_lambda (worker threads), embedded SQLite, WAL, "
                    "synchronous=FULL (read back in each run): every checkpoint committed "
                    "before it is answered",
        "aws-local": "DurableFunctionTestRunner "
                     f"{version_of('aws-durable-execution-sdk-python-testing')}, as "
                     "documented: in-memory store, its invocation pool (min(32, CPUs + 4) "
                     "threads); not durable",
        "dbos-wal": f"DBOS {version_of('dbos')} on SQLite, WAL, synchronous=FULL "
                    "(alarmtop's settings); def workflow of def @DBOS.step()s",
        "dbos": "DBOS on SQLite as it creates it: rollback journal, synchronous=FULL",
        "sdk-alone": "the SDK against a service that answers at once and keeps nothing",
    }
    return {
        "machine": machine(),
        "SDK": f"aws-durable-execution-sdk-python {version_of('aws-durable-execution-sdk-python')}",
        "workload": f"{STEPS} steps x -> x + 1 per execution (context.step, def bodies); "
                    "modes " + ", ".join(
                        f"{m}: {mode_size(m, args.quick, args.executions)[0]} executions, "
                        f"{mode_size(m, args.quick, args.executions)[1]} in flight"
                        for m in modes),
        "systems": {s: described[s] for s in systems},
        "SQLite fsync rate (commits/s, WAL, FULL)": round(fsync_rate(args.dir)),
    }


def compare(args: Any) -> list[Table]:
    systems = (args.systems or ",".join(DEFAULT)).split(",")
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)}: choose from {SYSTEMS}")
    modes = args.modes.split(",")
    started = time.monotonic()
    cfg = config(args, systems, modes)
    print_config("durable steps through the AWS SDK", cfg)
    runner = Runner(args)
    results: dict[tuple[str, str], Table] = {}
    for mode in modes:
        n, conc = mode_size(mode, args.quick, args.executions)
        for system in systems:
            results[(system, mode)] = Table(
                f"{system}, {mode}: {n:,} executions of {STEPS} steps, {conc} in flight")
        rounds(args.repeats, systems, lambda system, _round, mode=mode, n=n, conc=conc:
               runner.run(system, n, conc, results[(system, mode)]))
    fsync_after = fsync_rate(args.dir)
    for table in results.values():
        table.print()
    print("\nsettings read back on each system's own connection: " + "; ".join(
        f"{s}: {v}" for s, v in runner.settings.items()))
    split = where_the_cpu_goes(results, modes)
    ratios = ratios_of(results, modes)
    ratios.print((cfg["SQLite fsync rate (commits/s, WAL, FULL)"] + fsync_after) / 2)
    print(f"   load average (1 min) at the end: {machine()['load_1min']:.2f}")
    print(f"\nthis run took {(time.monotonic() - started) / 60:.1f} min")
    write_json(args.json_out, {
        "script": "aws_steps", "config": cfg, "settings": runner.settings,
        "fsync_after": fsync_after, "ratios": ratios.rows, "cpu_split": split,
        "tables": {t.title: t.as_dict() for t in results.values()}})
    return list(results.values())


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--systems", default=None,
                        help=f"default: {','.join(DEFAULT)}; also: dbos (rollback journal)")
    parser.add_argument("--modes", default="seq,c50")
    parser.add_argument("--executions", type=int, default=None,
                        help="executions per run in every mode (default: by mode)")
    parser.add_argument("--profile", default=None,
                        help="profile alarmtop's event loop in one run of the first --modes "
                             "(pyinstrument; HTML there, text beside it)")
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    if args.profile:
        mode = args.modes.split(",")[0]
        n, conc = mode_size(mode, args.quick, args.executions)
        print_config("durable steps through the AWS SDK, profiled (one alarmtop run)",
                     config(args, ["alarmtop"], [mode]))
        table = Table(f"alarmtop, {mode}, profiled")
        Runner(args).run("alarmtop", n, conc, table, args.profile)
        table.print()
        tables = [table]
    else:
        tables = compare(args)
    if args.json:
        print(json.dumps({t.title: t.as_dict() for t in tables}))


if __name__ == "__main__":
    main()
