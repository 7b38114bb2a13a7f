"""Run a conformance requirement against the engine, validated as the AWS suite does.

* `ensure_wheel()` fetches the pinned wheel with `pip download` into a cache
  (or takes `ALARMTOP_CONFORMANCE_WHEEL`), checks its sha256, and raises
  `WheelUnavailable` (-> skip) when it cannot be had, e.g. offline.
* `load_requirements()` reads the YAML files straight out of the wheel: the
  package's Python code is never imported.
* `run_requirement()` reproduces `validate.py`: Variables -> Input -> start ->
  (sync) run the execution to its end on the VirtualClock, fetch the history once,
  match it, check the result; (AsyncInvoke) the `PollingValidator` loop on the
  virtual clock: poll every 2 s, answer `CallbackStarted` events with the
  `CallbackActions` after their `Delay`, stop early in history-only mode.
  `ExpectedLogs` are checked against the lines the handler logged (see manifest).

`EngineClient` plays the Lambda client: the five calls the validator makes,
answered by `runtime.executions`, with the payloads encoded as the validator
sends them (`json.dumps(Payload)` for a success, the Error fields for a failure).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.conformance import handlers, manifest
from tests.conformance.matcher import (
    TERMINAL_STATUSES,
    CallbackAction,
    EventHistoryMatcher,
    LogValidator,
    PlaceholderContext,
    extract_callback_events,
    failure_error,
    find_matching_action,
    get_execution_status,
    success_result_bytes,
    validate_execution_result,
)

CACHE_DIR = Path(os.environ.get("ALARMTOP_CONFORMANCE_CACHE",
                                Path(__file__).resolve().parent / ".cache"))

# The validator's defaults (config.py) and this runner's safety nets (virtual seconds).
POLL_INTERVAL_SECONDS = 2.0
POLL_NO_PROGRESS_TIMEOUT_SECONDS = 30.0
SYNC_RUN_LIMIT_SECONDS = 3600
ASYNC_RUN_LIMIT_SECONDS = 3 * 3600

# Engine status -> `get_durable_execution()["Status"]`.
AWS_STATUS = {"succeeded": "SUCCEEDED", "failed": "FAILED", "timed_out": "TIMED_OUT",
              "aborted": "STOPPED"}
FINISHED = frozenset(AWS_STATUS)


# -- the wheel ----------------------------------------------------------------------------

class WheelUnavailable(Exception):
    """The wheel cannot be had (offline, pip missing): conformance tests are skipped."""


class WheelMismatch(Exception):
    """A wheel was found but it is not the pinned one: an error, never a skip."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ensure_wheel(cache_dir: Path = CACHE_DIR) -> Path:
    override = os.environ.get("ALARMTOP_CONFORMANCE_WHEEL")
    if override:
        path = Path(override)
        if not path.is_file():
            raise WheelUnavailable(f"ALARMTOP_CONFORMANCE_WHEEL={override} is not a file")
    else:
        path = cache_dir / manifest.WHEEL
        cache_dir.mkdir(parents=True, exist_ok=True)
        # Parallel test processes (xdist workers) each want the wheel: one downloads it,
        # the others wait for it instead of reading a half-written file.
        with (cache_dir / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not path.is_file():
                _download(cache_dir)
        if not path.is_file():
            raise WheelUnavailable(f"pip download did not produce {manifest.WHEEL} in "
                                   f"{cache_dir}")
    digest = _sha256(path)
    if digest != manifest.WHEEL_SHA256:
        raise WheelMismatch(f"{path} has sha256 {digest}, expected {manifest.WHEEL_SHA256} "
                            f"({manifest.PACKAGE} {manifest.VERSION}); delete it to refetch")
    return path


def _download(cache_dir: Path) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    spec = f"{manifest.PACKAGE}=={manifest.VERSION}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--python-version", "3.14",
           "--only-binary=:all:", "--disable-pip-version-check", "--timeout", "15",
           "--retries", "1", spec, "-d", str(cache_dir)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WheelUnavailable(f"cannot fetch {spec} with pip download ({exc}); offline? "
                               "set ALARMTOP_CONFORMANCE_WHEEL to a local copy") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise WheelUnavailable(f"cannot fetch {spec} with pip download (offline?): {tail[0]}; "
                               "set ALARMTOP_CONFORMANCE_WHEEL to a local copy")


# -- the requirements ---------------------------------------------------------------------

@dataclass(frozen=True)
class Requirement:
    id: str
    suite: str
    data: dict[str, Any]

    @property
    def description(self) -> str:
        return str(self.data.get("description", ""))

    @property
    def is_async(self) -> bool:
        return bool(self.data.get("AsyncInvoke", False))


def load_requirements(wheel: Path) -> dict[str, Requirement]:
    """Every requirement YAML in the wheel, by id (the file stem), suite = top folder."""
    prefix = manifest.REQUIREMENTS_DIR + "/"
    out: dict[str, Requirement] = {}
    with zipfile.ZipFile(wheel) as zf:
        for name in sorted(zf.namelist()):
            if not (name.startswith(prefix) and name.endswith(".yaml")):
                continue
            rel = name[len(prefix):]
            suite, stem = rel.split("/", 1)[0], Path(rel).stem
            out[stem] = Requirement(stem, suite, yaml.safe_load(zf.read(name)))
    return out


# -- the engine as the Lambda client ------------------------------------------------------

class CallbackSendError(Exception):
    pass


class EngineClient:
    """The Lambda calls of the validator (`clients.py` / `callback.py`), on the engine."""

    def __init__(self, runtime: Any, execution_id: str) -> None:
        self.rt = runtime
        self.execution_id = execution_id

    async def get_durable_execution_history(self) -> dict[str, Any]:
        return {"Events": await self.rt.executions.history(self.execution_id)}

    async def get_durable_execution(self) -> dict[str, Any]:
        d = await self.rt.executions.describe(self.execution_id)
        out: dict[str, Any] = {"Status": AWS_STATUS.get(d["status"], "RUNNING")}
        if d["status"] == "succeeded":
            out["Result"] = json.dumps(d["result"])  # the handler's output, as JSON text
        if d.get("error"):
            out["Error"] = d["error"]
        return out

    async def send(self, callback_id: str, action: CallbackAction, payload: Any) -> None:
        """`CallbackSender.send`: success carries `json.dumps(Payload)`, failure the Error."""
        ex = self.rt.executions
        try:
            if action.operation == "success":
                body = success_result_bytes(payload)
                await ex.send_callback_success(callback_id,
                                               None if body is None else body.decode("utf-8"))
            elif action.operation == "failure":
                error = failure_error(payload) or {}
                if "StackTrace" in error:
                    raise CallbackSendError("the engine's send_callback_failure() takes no "
                                            "StackTrace")
                kwargs: dict[str, Any] = {}
                if "ErrorType" in error:
                    kwargs["error_type"] = error["ErrorType"]
                if "ErrorMessage" in error:
                    kwargs["message"] = error["ErrorMessage"]
                if "ErrorData" in error:
                    kwargs["data"] = error["ErrorData"]
                await ex.send_callback_failure(callback_id, **kwargs)
            else:
                await ex.send_callback_heartbeat(callback_id)
        except CallbackSendError:
            raise
        except Exception as exc:
            raise CallbackSendError(f"Callback {action.operation} failed for "
                                    f"callback_id={callback_id}: {exc}") from exc


# -- running a requirement ----------------------------------------------------------------

@dataclass
class Outcome:
    requirement: Requirement
    execution_id: str
    passed: bool
    errors: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    execution: dict[str, Any] | None = None
    placeholders: dict[str, Any] = field(default_factory=dict)
    callbacks_sent: int = 0

    def explain(self) -> str:
        lines = [f"requirement {self.requirement.id} ({self.requirement.suite}): "
                 f"{self.requirement.description}"]
        lines += [f"  - {e}" for e in self.errors]
        lines.append(f"  execution {self.execution_id}: {self.execution}")
        lines.append("  actual history:")
        lines += ["    " + compact_event(ev) for ev in self.events]
        return "\n".join(lines)


def compact_event(ev: dict[str, Any], limit: int = 300) -> str:
    """One line per event for failure messages (long details are cut at `limit`)."""
    keys = ("EventId", "EventType", "SubType", "Id", "Name", "ParentId")
    head = " ".join(f"{k}={ev[k]}" for k in keys if k in ev)
    details = json.dumps(ev.get(f"{ev.get('EventType')}Details"), default=str)
    if len(details) > limit:
        details = f"{details[:limit]}... ({len(details)} chars)"
    return f"{head} {details}"


async def run_requirement(req: Requirement, rt: Any, clock: Any) -> Outcome:
    """Validate one requirement on a started runtime driven by `clock` (a VirtualClock)."""
    spec = handlers.HANDLERS.get(req.id)
    if spec is None:
        raise LookupError(f"no handler written for requirement {req.id}")
    rt.register_execution(spec.fn)
    for other in spec.others:
        rt.register_execution(other)
    ctx = PlaceholderContext()
    ctx.resolve_variables(req.data.get("Variables"))
    resolved_input = ctx.substitute(req.data.get("Input"))
    execution_id = f"ct-{req.id}-{secrets.token_hex(4)}"
    if spec.setup is not None:
        spec.setup(rt, execution_id)
    client = EngineClient(rt, execution_id)
    try:
        await rt.executions.start(spec.fn.name, resolved_input, execution_id=execution_id)
        if req.is_async:
            out = await _validate_async(req, ctx, client, clock)
        else:
            out = await _validate_sync(req, ctx, client, clock)
        if out.passed:
            out.errors = _validate_logs(req, ctx, execution_id)
            out.passed = not out.errors
        return out
    finally:
        handlers.forget(execution_id)


async def validate(req: Requirement, ctx: PlaceholderContext, client: EngineClient,
                   clock: Any) -> Outcome:
    """Validate a started execution against `req` (sync or async, as it says)."""
    if req.is_async:
        return await _validate_async(req, ctx, client, clock)
    return await _validate_sync(req, ctx, client, clock)


async def _run_until_finished(client: EngineClient, clock: Any) -> None:
    """What a synchronous Invoke waits for: the execution's end (timers on the clock)."""
    deadline = clock.now_ms() + SYNC_RUN_LIMIT_SECONDS * 1000
    await clock.advance(0)
    while True:
        d = await client.rt.executions.describe(client.execution_id)
        if d["status"] in FINISHED:
            return
        due = clock.next_timer_ms()
        if due is None or due > deadline:
            return
        await clock.advance_to_ms(due)


async def _validate_sync(req: Requirement, ctx: PlaceholderContext, client: EngineClient,
                         clock: Any) -> Outcome:
    await _run_until_finished(client, clock)
    events = (await client.get_durable_execution_history())["Events"]
    execution = await client.get_durable_execution()
    out = Outcome(req, client.execution_id, False, events=events, execution=execution)
    expected_events = req.data.get("ExpectedExecutionHistory")
    if not expected_events:
        out.errors = ["No ExpectedExecutionHistory found in description file"]
        return out
    match = EventHistoryMatcher(ctx).match(expected_events, events)
    out.placeholders = match.resolved_placeholders
    if not match.success:
        out.errors = match.errors
        return out
    expected_result = req.data.get("ExpectedResult")
    if expected_result:
        out.errors = validate_execution_result(execution, expected_result, ctx)
    out.passed = not out.errors
    return out


async def _validate_async(req: Requirement, ctx: PlaceholderContext, client: EngineClient,
                          clock: Any) -> Outcome:
    """`PollingValidator.validate`, with `time.sleep` replaced by the virtual clock."""
    out = Outcome(req, client.execution_id, False)
    try:
        actions = [CallbackAction.from_dict(a) for a in req.data.get("CallbackActions", [])]
    except ValueError as exc:
        out.errors = [f"Invalid CallbackAction: {exc}"]
        return out
    cfg = req.data.get("AsyncConfig", {}) or {}
    interval = float(cfg.get("PollIntervalSeconds", POLL_INTERVAL_SECONDS))
    no_progress_s = float(cfg.get("NoProgressTimeoutSeconds", POLL_NO_PROGRESS_TIMEOUT_SECONDS))
    expected_events: list[dict[str, Any]] = req.data.get("ExpectedExecutionHistory", [])
    expected_result: dict[str, Any] | None = req.data.get("ExpectedResult")
    history_only = expected_result is None

    handled: set[str] = set()
    used: set[int] = set()
    errors: list[str] = []
    events: list[dict[str, Any]] = []
    last_count = 0
    last_progress_ms = clock.now_ms()
    give_up_ms = clock.now_ms() + ASYNC_RUN_LIMIT_SECONDS * 1000

    while True:
        await clock.advance(interval)
        history = await client.get_durable_execution_history()
        events = history["Events"]
        status = get_execution_status(history)
        if status in TERMINAL_STATUSES:
            break
        if len(events) > last_count:
            last_count, last_progress_ms = len(events), clock.now_ms()
        else:
            elapsed = (clock.now_ms() - last_progress_ms) / 1000
            if elapsed >= no_progress_s:
                errors.append(f"No new events for {elapsed:.1f}s (timeout: {no_progress_s}s)")
                break
        if clock.now_ms() >= give_up_ms:
            errors.append(f"runner safety net: not finished after {ASYNC_RUN_LIMIT_SECONDS}s "
                          "of virtual time")
            break
        for cb_event in extract_callback_events(events, handled):
            callback_id = cb_event.get("CallbackStartedDetails", {}).get("CallbackId", "")
            action, idx = find_matching_action(cb_event, actions, used, ctx)
            if action is None:
                if actions:
                    errors.append(f"No matching CallbackAction for callback "
                                  f"'{cb_event.get('Name', '<anonymous>')}' (id={callback_id})")
                handled.add(callback_id)
                continue
            if idx is not None:
                used.add(idx)
            if action.operation != "heartbeat":  # a heartbeat leaves the callback open
                handled.add(callback_id)
            try:
                if action.delay_seconds > 0:
                    await clock.advance(action.delay_seconds)
                await client.send(callback_id, action, ctx.substitute(action.payload))
                out.callbacks_sent += 1
            except (CallbackSendError, ValueError) as exc:
                errors.append(str(exc))
        if history_only and expected_events:
            match = EventHistoryMatcher(ctx).match(expected_events, events)
            if match.success:
                out.passed, out.events = True, events
                out.placeholders = match.resolved_placeholders
                out.execution = await client.get_durable_execution()
                return out

    out.events = events
    out.execution = await client.get_durable_execution()
    if expected_events:
        match = EventHistoryMatcher(ctx).match(expected_events, events)
        out.placeholders = match.resolved_placeholders
        if not match.success:
            out.errors = errors + match.errors
            return out
    if expected_result:
        errors.extend(validate_execution_result(out.execution, expected_result, ctx))
    out.errors = errors
    out.passed = not errors
    return out


def _validate_logs(req: Requirement, ctx: PlaceholderContext, execution_id: str) -> list[str]:
    expected_logs = req.data.get("ExpectedLogs")
    if not expected_logs:
        return []
    if req.id not in manifest.LOGS_FROM_HANDLER:
        return [f"ExpectedLogs of {req.id} cannot be checked here (no CloudWatch); list it in "
                "manifest.LOGS_FROM_HANDLER or manifest.CANNOT_HONOUR"]
    result = LogValidator().validate(expected_logs, handlers.LOGS.get(execution_id, []), ctx)
    return result.errors
