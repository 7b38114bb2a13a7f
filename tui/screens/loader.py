"""When a view fetches: one fetch at a time, asks coalesced, paced (`paging.RefreshGate`).

A view asks for a fetch whenever what it shows may be stale (a frame touched its
kind, the operator moved or acted). `Loader` starts the fetch when the gate says
so, only while the view is the one shown (a dialog over it still counts), and
asks the gate again when the fetch ends: asks that came meanwhile become one
more fetch, never a queue of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from textual.timer import Timer
from textual.worker import Worker

from alarmtop.tui.paging import RefreshGate

if TYPE_CHECKING:
    from alarmtop.tui.screens.base import ConsoleScreen


class Loader:
    def __init__(self, screen: ConsoleScreen, run: Callable[[], Awaitable[None]],
                 gate: RefreshGate, name: str, *, paced: bool = True) -> None:
        self.screen, self.run, self.gate, self.name = screen, run, gate, name
        self.paced = paced  # also every `gate.max_age_s` while shown, asked or not
        self.timer: Timer | None = None
        self.starting = False  # a fetch's worker is made and has not told the gate yet

    def ask(self, urgent: bool = False) -> None:
        self.gate.ask(urgent)
        self.kick()

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.stop()
            self.timer = None

    def kick(self) -> None:
        """Start the fetch if the gate says now, else wake up when it will."""
        self.stop()
        if self.starting:
            return  # its worker starts soon: asks until then are in its fetch
        console = self.screen.console
        if console.active_view() is not self.screen:
            return  # not shown: it asks again when it is
        wait = self.gate.wait(console.clock())
        if wait is None or (not self.gate.wanted and not self.paced):
            return  # one is in flight (its end kicks again), or nothing to do
        if wait > 0:
            self.timer = self.screen.set_timer(wait, self.kick, name=self.name)
            return
        self.starting = True
        worker: Worker[None] = self.screen.run_worker(self._run, group=self.name)
        del worker  # the gate knows it runs; its end kicks again

    async def _run(self) -> None:
        self.starting = False
        self.gate.started(self.screen.console.clock())
        try:
            await self.run()
        finally:
            self.gate.finished()
        if self.screen.is_mounted:
            self.kick()
