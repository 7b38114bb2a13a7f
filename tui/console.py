"""What the views, dialogs and command palette know of the console: `Console`.

The app (`app.AlarmtopApp`) imports every view; a view typing `self.app` as the
app would import it back. So the views type against this protocol instead, which
imports no view and no app: imports point one way, app on top, views below it,
this under them. `AlarmtopApp` satisfies it, and mypy holds it to that (app.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from textual.screen import Screen
    from textual.widget import AwaitMount

    from alarmtop.tui.bulk import BulkBook
    from alarmtop.tui.client import OpsClient
    from alarmtop.tui.listings import ServerListings
    from alarmtop.tui.marks import Marks
    from alarmtop.tui.pacing import RedrawPacer
    from alarmtop.tui.state import ConsoleState


@dataclass(frozen=True)
class Outcome:
    """What an operator command came to: done (with the server's answer) or not (why)."""

    ok: bool
    data: Any = None
    error: str = ""
    refused: bool = False  # the server (or the console) said no: nothing was done


class Console(Protocol):
    """The console as the views use it: its connection and state, its commands."""

    client: OpsClient
    listings: ServerListings
    target: str  # what the console is connected to, for the header
    confirm_actions: bool  # r and n ask first
    state: ConsoleState
    pacer: RedrawPacer
    snapshots: int  # snapshots received: pages fetched before the last one are stale
    marks: Marks
    bulks: BulkBook

    @property
    def read_only(self) -> bool: ...

    @property
    def read_only_reason(self) -> str: ...

    @property
    def role_label(self) -> str: ...

    def clock(self) -> float: ...

    async def fetch(self, op: str, **args: Any) -> Any: ...

    async def perform(self, op: str, target: str, args: dict[str, Any], *,
                      said: Callable[[Any], str] | None = None) -> Outcome: ...

    async def try_command(self, op: str, target: str, /, **args: Any) -> tuple[bool, str]: ...

    async def command(self, op: str, target: str, /, **args: Any) -> bool: ...

    def drill(self, kind: str, target: str) -> None: ...

    def redraw_soon(self) -> None: ...

    def active_view(self) -> Screen[Any] | None: ...

    def toggle_confirmations(self) -> None: ...

    def action_help(self) -> None: ...

    def switch_mode(self, mode: str) -> AwaitMount: ...
