"""Fault points at every write boundary of the storage layer, for tests.

A loss window hides from random kills: these points let a test fail a write, or
kill the process, exactly before or after a commit of each kind, and check each
side of it on purpose. Points:

- ``object.commit.before`` / ``object.commit.after``: an object's database commit
  (info: ``key``);
- ``index.commit.before`` / ``index.commit.after``: a commit of the runtime database
  (alarm rows, hints, execution logs, ledger, audit), on its database thread (info:
  ``keys``, the alarm rows it writes, and ``extras``, how many other writes ride it);
- ``index.state.before`` / ``index.state.after``: SQLite's record of whether the
  runtime database was closed cleanly, written (and checkpointed) at open and at
  close (info: ``clean``).

An action is called with the point's info; it may return (nothing happens), raise
(the write fails with that error, as a real one would) or end the process. Nothing
is armed unless a test arms it, and an unarmed point costs one attribute read.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

Action = Callable[[dict[str, Any]], None]
POINTS = ("object.commit.before", "object.commit.after", "index.commit.before",
          "index.commit.after", "index.state.before", "index.state.after")


class FaultPoints:
    def __init__(self) -> None:
        self._actions: dict[str, Action] = {}
        self._lock = threading.Lock()  # index points are hit on the database thread
        self.active = False

    def arm(self, point: str, action: Action) -> None:
        if point not in POINTS:
            raise ValueError(f"unknown fault point {point!r}; points: {', '.join(POINTS)}")
        with self._lock:
            self._actions[point] = action
            self.active = True

    def disarm(self, point: str | None = None) -> None:
        with self._lock:
            if point is None:
                self._actions.clear()
            else:
                self._actions.pop(point, None)
            self.active = bool(self._actions)

    def hit(self, point: str, **info: Any) -> None:
        with self._lock:
            action = self._actions.get(point)
        if action is not None:
            action(info)


FAULT_POINTS = FaultPoints()


def locked(info: dict[str, Any]) -> None:
    """An action: the write fails as if another connection held the lock too long."""
    raise sqlite3.OperationalError("database is locked")


def kill(info: dict[str, Any]) -> None:
    """An action: the process dies here, as SIGKILL would kill it."""
    os.kill(os.getpid(), signal.SIGKILL)


def when(predicate: Callable[[dict[str, Any]], bool], action: Action, *,
         times: int | None = 1) -> Action:
    """`action` for the hits `predicate` selects, at most `times` of them (None: all)."""
    left = [times]

    def maybe(info: dict[str, Any]) -> None:
        if left[0] == 0 or not predicate(info):
            return
        if left[0] is not None:
            left[0] -= 1
        action(info)
    return maybe
