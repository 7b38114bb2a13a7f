"""The one command table: each op declared once, with a role and an audit rule that
agree, and a handler; what it refuses at import rather than in production."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from alarmtop.server.commands import COMMANDS, OPERATOR_OPS, QUERY_OPS
from alarmtop.server.protocol import Audit, CommandSpec, Request, Role, spec_table

# The commands the runtime audits itself, given the client's address and role: the
# execution actions, and a bulk batch (the bulk service's rows).
RUNTIME_AUDITED = {"retry_compensation", "resolve", "abort", "hand_to_human", "pause",
                   "resume", "redrive", "fork", "complete_callback", "bulk_start"}


async def handler(services: object, request: Request) -> Any:
    return None


def test_every_op_has_a_rule_a_role_a_handler_and_a_line_of_doc() -> None:
    for op, spec in COMMANDS.items():
        assert spec.op == op
        assert inspect.iscoroutinefunction(spec.handler), op
        assert spec.doc and "\n" not in spec.doc, op
    assert {op for op, s in COMMANDS.items() if s.audit is Audit.RUNTIME} == RUNTIME_AUDITED
    assert QUERY_OPS == {op for op, s in COMMANDS.items() if s.role is Role.VIEWER}
    assert OPERATOR_OPS == set(COMMANDS) - QUERY_OPS
    # Every command takes a reason for its audit row, but the preview, which changes
    # nothing; no query does.
    assert {op for op, s in COMMANDS.items() if "reason" not in s.fields} == QUERY_OPS | {
        "bulk_preview"}


def test_an_op_declared_twice_is_refused() -> None:
    one = CommandSpec("x", {}, Role.VIEWER, Audit.QUERY, handler, "one")
    two = CommandSpec("x", {}, Role.VIEWER, Audit.QUERY, handler, "two")
    with pytest.raises(ValueError, match="'x' is declared twice"):
        spec_table([one], [two])


@pytest.mark.parametrize("role, audit", [(Role.OPERATOR, Audit.QUERY),
                                         (Role.VIEWER, Audit.SERVER),
                                         (Role.VIEWER, Audit.RUNTIME)])
def test_a_query_is_what_viewers_may_run_and_only_that(role: Role, audit: Audit) -> None:
    with pytest.raises(ValueError, match="a query is what viewers may run"):
        CommandSpec("x", {}, role, audit, handler, "x")


def test_an_operator_runs_anything_a_viewer_queries() -> None:
    assert Role.VIEWER.admits("viewer") and Role.VIEWER.admits("operator")
    assert Role.OPERATOR.admits("operator") and not Role.OPERATOR.admits("viewer")
