"""What every ops command is made of, and nothing else: pure, imports nothing of server.

A command is declared once, as a `CommandSpec`: its op name, its fields, the role
that may run it, who writes its audit row (`Audit`), its handler and one line that
says what it does. The handler modules declare their commands next to their
handlers; `commands.py` gathers them into the one table that `wire` decodes
against, `ops` dispatches through and the console builds its requests from.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

MAX_PAGE = 500  # rows of one page, at most (`limit`)
MAX_OFFSET = 10**9


class ProtocolError(ValueError):
    """A frame that cannot be accepted.

    `id` is the command id when one was readable; `op` the op it named when that was
    a string, and `fields` the frame's other fields when it was a JSON object: enough
    for the audit log to say what was refused, though the frame was never a command.
    """

    def __init__(self, message: str, id: int | None = None, *, op: str | None = None,
                 fields: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.id = id
        self.op = op
        self.fields = fields or {}


@dataclass(frozen=True)
class Field:
    """One field of a command: its JSON type (`object`: any), whether it must be there."""

    type: type | tuple[type, ...]
    required: bool = True
    doc: str = ""


# Field shapes many commands share.
OPTIONAL_TEXT = Field(str, False)
BY_MS = Field(int, True, "how much later")  # a snooze's
SORTED = {"sort": OPTIONAL_TEXT, "desc": Field(bool, False)}
# The cursor of the last row of the page before (a result's `cursors` entry, as given):
# the page starts after it, `offset` rows further.
AFTER = {"after": Field(list, False)}
PAGED = {"offset": Field(int, False), "limit": Field(int, False)}


class Role(enum.StrEnum):
    """The role a command needs: a viewer's token runs queries, an operator's anything."""

    VIEWER = "viewer"
    OPERATOR = "operator"

    def admits(self, role: str) -> bool:
        """Whether a connection of `role` may run a command that needs this one."""
        return self is Role.VIEWER or role == Role.OPERATOR


class Audit(enum.Enum):
    """Who writes a command's row of the audit log.

    QUERY: nobody; it changes nothing, the console sends many a second, and past its
        deadline it is simply cancelled.
    SERVER: the ops service, exactly one row whatever the outcome: done, failed,
        refused, or answered as failed at its deadline (then left to finish, its
        late outcome logged).
    RUNTIME: the runtime, when it runs it (the handler hands it the client's address
        and role); the ops service writes only the rows of what never reached it
        (refusals) and of a deadline passed.
    """

    QUERY = "query"
    SERVER = "server"
    RUNTIME = "runtime"


@dataclass(frozen=True)
class Request:
    """What a handler is given: the command's checked fields, who sent it and as what."""

    args: dict[str, Any]
    actor: str  # the client's address
    role: str


def result_summary(args: Mapping[str, Any], data: Any) -> dict[str, Any]:
    """The usual audit detail of a command that is done: its result, in short."""
    if data is None:
        return {}
    if isinstance(data, dict):
        data = {k: data[k] for k in list(data)[:8] if k != "attempts"}
    return {"result": data}


def no_result(args: Mapping[str, Any], data: Any) -> dict[str, Any]:
    """An audit detail of nothing but the outcome."""
    return {}


# What a command's audit row says besides outcome and error: called with the result
# when it is done, with None when it failed or passed its deadline.
AuditDetail = Callable[[Mapping[str, Any], Any], dict[str, Any]]
ServicesT = TypeVar("ServicesT")  # what the handlers work with: `services.Services`


@dataclass(frozen=True)
class CommandSpec(Generic[ServicesT]):
    """One ops command, declared once: the wire checks its fields, the ops service its
    role, runs its handler within the deadline and audits it by its rule."""

    op: str
    fields: dict[str, Field]
    role: Role
    audit: Audit
    handler: Callable[[ServicesT, Request], Awaitable[Any]]
    doc: str
    audit_detail: AuditDetail = result_summary

    def __post_init__(self) -> None:
        if (self.audit is Audit.QUERY) != (self.role is Role.VIEWER):
            # A query open to viewers changes nothing; what changes something is an
            # operator's and audited. Said at import, not found in production.
            raise ValueError(f"{self.op}: a query is what viewers may run, and only that")


def spec_table(*groups: list[CommandSpec[ServicesT]]) -> dict[str, CommandSpec[ServicesT]]:
    """The specs of `groups` by op; an op declared twice is refused."""
    table: dict[str, CommandSpec[ServicesT]] = {}
    for group in groups:
        for spec in group:
            if spec.op in table:
                raise ValueError(f"the op {spec.op!r} is declared twice")
            table[spec.op] = spec
    return table


def split_object(ref: str) -> tuple[str, str]:
    """`Class/name` -> (class, name); the name may itself contain '/'."""
    cls, sep, name = ref.partition("/")
    if not sep or not cls or not name:
        raise ProtocolError(f"objects are written 'Class/name', not {ref!r}")
    return cls, name
