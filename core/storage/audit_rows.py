"""The audit log's rows, the same on both backends: the columns written, each
entry's values, and the newest-first listing."""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from typing import Any

from alarmtop.core.model.keys import Cursor

AUDIT_INSERT_COLUMNS = "at_ms, actor, role, action, target, reason, ok, detail, node"
_dumps = json.JSONEncoder(separators=(",", ":")).encode


def audit_values(entry: dict[str, Any], node_id: str | None,
                 ok: Any = bool) -> tuple[Any, ...]:
    """An entry's values in `AUDIT_INSERT_COLUMNS` order; `ok` spells the boolean as
    the dialect stores it (SQLite: `int`)."""
    return (entry["at_ms"], entry["actor"], entry.get("role"), entry["action"],
            entry.get("target"), entry.get("reason"), ok(bool(entry.get("ok", True))),
            _dumps(entry.get("detail")), node_id)


def audit_rows_of(entries: Sequence[dict[str, Any]], node_id: str | None,
                  ok: Any = bool) -> list[tuple[Any, ...]]:
    return [audit_values(e, node_id, ok) for e in entries]


class AuditRowsBase:
    """The dialect-free half of `AuditRows`."""

    async def audit_page(self, after: Cursor | None = None, limit: int = 100, *,
                         offset: int = 0, desc: bool = True) -> builtins.list[dict[str, Any]]:
        raise NotImplementedError

    async def audit_list(self, limit: int = 100,
                         offset: int = 0) -> builtins.list[dict[str, Any]]:
        """The newest rows first, by offset (see `audit_page`)."""
        return await self.audit_page(None, limit, offset=offset)
