"""A watchdog thread for the event loop: a handler that blocks it is named, and a
process asked to stop ends in time even then.

Everything of a runtime shares one event loop: a handler that calls something
blocking (`time.sleep`, a synchronous HTTP client, a long computation) stalls every
object, every alarm, the ops channel and the stop itself. The loop beats every
`BEAT_S`; a thread looks every `CHECK_S`, and when the last beat is older than
`threshold_s` it logs which handler holds the loop (the object, its method, and
the line it is at, read from the loop thread's stack), once per stall, and again
when the loop is back, with how long it was held.

`exit_within(seconds)` is the exit promise of `alarmtop serve`: armed when a stop
is asked for (SIGINT, SIGTERM), the thread ends the process at that deadline if it
is still there, whatever holds the loop. Nothing is lost by it that a crash would
keep: every commit is durable when it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
from types import FrameType

from alarmtop.core.kernel.objects.durable_object import DurableObject

BEAT_S = 0.2
CHECK_S = 0.1
DEFAULT_THRESHOLD_S = 2.0
log = logging.getLogger("alarmtop.runtime")


class LoopWatchdog:
    """Watch the running loop (`start`, `stop`); keep an exit promise (`exit_within`)."""

    def __init__(self, threshold_s: float | None = DEFAULT_THRESHOLD_S) -> None:
        self.threshold_s = threshold_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._beat = time.monotonic()
        self._beat_handle: asyncio.TimerHandle | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._watching = False
        self._stalled_since: float | None = None  # the beat before the stall it reported
        self._exit_at: float | None = None
        self._exit_code = 0
        self.stalls = 0  # stalls reported so far

    # -- the loop's side --------------------------------------------------------------------

    def start(self) -> None:
        """In the loop: beat, and have the thread watch the beats."""
        if self.threshold_s is None or self._watching:
            return
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._beat = time.monotonic()
        self._watching = True
        self._beat_handle = self._loop.call_later(BEAT_S, self._on_beat)
        self._ensure_thread()

    def _on_beat(self) -> None:
        self._beat = time.monotonic()
        if self._watching and self._loop is not None:
            self._beat_handle = self._loop.call_later(BEAT_S, self._on_beat)

    def stop(self) -> None:
        """Stop watching (an exit promise armed stays armed)."""
        self._watching = False
        handle, self._beat_handle = self._beat_handle, None
        if handle is not None:
            handle.cancel()

    def exit_within(self, seconds: float, code: int = 0) -> None:
        """End the process `seconds` from now unless it has ended by then (callable from
        a signal handler, whatever the loop is doing). Keeps the earliest deadline."""
        at = time.monotonic() + seconds
        with self._lock:
            if self._exit_at is None or at < self._exit_at:
                self._exit_at, self._exit_code = at, code
        if self._loop_thread is None:
            self._loop_thread = threading.get_ident()
        self._ensure_thread()

    # -- the thread's side ------------------------------------------------------------------

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._watch, name="alarmtop-loop-watchdog",
                                            daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        while self._watching or self._exit_at is not None:
            time.sleep(CHECK_S)
            now = time.monotonic()
            exit_at = self._exit_at
            if exit_at is not None and now >= exit_at:
                self._exit(now)
            if self._watching and self.threshold_s is not None:
                self._check(now, self.threshold_s)

    def _check(self, now: float, threshold_s: float) -> None:
        beat = self._beat
        held = now - beat
        if self._stalled_since is None and held >= threshold_s:
            self._stalled_since = beat
            self.stalls += 1
            log.error("the event loop has been held for %.1f s by %s: every object, alarm and "
                      "operator command waits for it, and so does a stop. Await slow work "
                      "(or run it with asyncio.to_thread) instead of blocking", held,
                      self.holder())
        elif self._stalled_since is not None and beat > self._stalled_since:
            log.warning("the event loop is free again after %.1f s",
                        beat - self._stalled_since)
            self._stalled_since = None

    def holder(self) -> str:
        """What the loop thread runs now: the object's handler, and where it is."""
        tid = self._loop_thread
        frame = sys._current_frames().get(tid) if tid is not None else None
        return describe_stack(frame)

    def _exit(self, now: float) -> None:
        held = now - self._beat
        what = self.holder() if held >= CHECK_S * 3 else "nothing (the stop ran late)"
        with contextlib.suppress(Exception):
            log.error("exiting now, as promised when the stop was asked for: the event loop "
                      "is held by %s; what it was doing is recovered at the next start, as "
                      "after a crash", what)
        with contextlib.suppress(Exception):
            logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(self._exit_code)


def describe_stack(frame: FrameType | None) -> str:
    """`Class/name.method() at file:line` for the innermost object handler on the stack
    (the line is the innermost one of all: where it blocks), else where it is."""
    if frame is None:
        return "unknown code"
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    f: FrameType | None = frame
    while f is not None:
        try:
            owner = f.f_locals.get("self")
        except Exception:  # a frame changing under us: look further up
            owner = None
        if isinstance(owner, DurableObject):
            ctx = owner.ctx
            return (f"{type(owner).__name__}/{getattr(ctx, 'id', '?')}.{f.f_code.co_name}() "
                    f"at {where}")
        f = f.f_back
    return f"code outside any object's handler, at {where}"
