"""The walls around an object's own SQL on SQLite: an authorizer.

An object's statements run in its own database, which also holds the runtime's
rows for it (`_alarmtop_kv`, its key-values; `_alarmtop_alarm`, its alarm intent;
`_alarmtop_meta`, whose database it is). While one of its statements is prepared,
the authorizer refuses:

- `ATTACH` and `DETACH`: another database (the runtime's, or another object's)
  is out of reach;
- any use of the runtime's tables (`_alarmtop_*`: reading, writing, dropping,
  altering, indexing or triggering on them, or making a table of that name), so a
  drop of every table leaves them, and the object keeps working;
- transaction control (`BEGIN`, `COMMIT`, `ROLLBACK`, `SAVEPOINT`, `RELEASE`): the
  event's transaction is the runtime's (`ctx.storage.transaction()` groups writes);
- `PRAGMA`s that change how the database is kept (journal_mode, synchronous,
  writable_schema, query_only, wal_checkpoint...): a pragma is allowed bare (it
  reads a setting) or, with an argument, only when it is on the list below;
- `load_extension()`.

Authorization happens when a statement is prepared. Installing the authorizer
expires every prepared statement of the connection (SQLite does so), so a cached
statement of the runtime's is prepared again, under it, before the object's text
can reuse it; it is removed once the statement has run.
"""

from __future__ import annotations

import sqlite3

RUNTIME_PREFIX = "_alarmtop_"

# Allowed with an argument: they read the schema (the argument names a table or an
# index), or set something that concerns the object's own statements only.
PRAGMAS_WITH_ARGUMENT = frozenset({
    "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
    "foreign_key_list", "foreign_key_check", "integrity_check", "quick_check",
    "foreign_keys", "defer_foreign_keys", "recursive_triggers", "case_sensitive_like",
    "reverse_unordered_selects", "automatic_index", "user_version", "application_id",
    "cache_size", "optimize", "busy_timeout",
})
# Refused even bare: they act rather than read.
PRAGMAS_THAT_ACT = frozenset({"wal_checkpoint", "incremental_vacuum", "shrink_memory",
                              "wal_autocheckpoint"})
# Actions whose first two arguments may name a table (or index) of the database.
_NAMED = frozenset({
    sqlite3.SQLITE_CREATE_INDEX, sqlite3.SQLITE_CREATE_TABLE, sqlite3.SQLITE_CREATE_TEMP_INDEX,
    sqlite3.SQLITE_CREATE_TEMP_TABLE, sqlite3.SQLITE_CREATE_TEMP_TRIGGER,
    sqlite3.SQLITE_CREATE_TEMP_VIEW, sqlite3.SQLITE_CREATE_TRIGGER, sqlite3.SQLITE_CREATE_VIEW,
    sqlite3.SQLITE_DELETE, sqlite3.SQLITE_DROP_INDEX, sqlite3.SQLITE_DROP_TABLE,
    sqlite3.SQLITE_DROP_TEMP_INDEX, sqlite3.SQLITE_DROP_TEMP_TABLE,
    sqlite3.SQLITE_DROP_TEMP_TRIGGER, sqlite3.SQLITE_DROP_TEMP_VIEW,
    sqlite3.SQLITE_DROP_TRIGGER, sqlite3.SQLITE_DROP_VIEW, sqlite3.SQLITE_INSERT,
    sqlite3.SQLITE_READ, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_ALTER_TABLE,
    sqlite3.SQLITE_ANALYZE, sqlite3.SQLITE_REINDEX, sqlite3.SQLITE_CREATE_VTABLE,
    sqlite3.SQLITE_DROP_VTABLE,
})


class ObjectSqlGuard:
    """The authorizer of one object's statements; `refused` says why the last one was
    refused (SQLite itself only says "not authorized")."""

    __slots__ = ("refused",)

    def __init__(self) -> None:
        self.refused: str | None = None

    def __call__(self, action: int, arg1: str | None, arg2: str | None, db: str | None,
                 source: str | None) -> int:
        why = refusal(action, arg1, arg2)
        if why is None:
            return sqlite3.SQLITE_OK
        self.refused = why
        return sqlite3.SQLITE_DENY

    def run(self, conn: sqlite3.Connection, sql: str,
            params: tuple[object, ...]) -> tuple[list[sqlite3.Row], tuple[str, ...], int]:
        """On the connection's thread: the statement's rows, columns and rows changed."""
        self.refused = None
        before = conn.total_changes
        conn.set_authorizer(self)
        try:
            cursor = conn.execute(sql, params)
            rows = cursor.fetchall()
        finally:
            conn.set_authorizer(None)
        columns = tuple(d[0] for d in cursor.description or ())
        return rows, columns, conn.total_changes - before


def refusal(action: int, arg1: str | None, arg2: str | None) -> str | None:
    """Why an object's statement may not do `action` (None: it may)."""
    if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
        return ("ATTACH and DETACH are refused: an object's SQL reaches its own database "
                "only")
    if action in (sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT):
        return ("transaction control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE) is "
                "refused: the event's writes are one transaction, committed by the runtime; "
                "group writes with `async with ctx.storage.transaction():`")
    if action == sqlite3.SQLITE_PRAGMA:
        name = (arg1 or "").lower()
        if name in PRAGMAS_THAT_ACT or (arg2 is not None and name not in PRAGMAS_WITH_ARGUMENT):
            return (f"PRAGMA {name} is refused in an object's SQL: it changes how the "
                    "database is kept, which is the runtime's to decide")
        return None
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() == "load_extension":
        return "load_extension() is refused in an object's SQL"
    if action in _NAMED:
        for table in (arg1, arg2):
            if table is not None and table.lower().startswith(RUNTIME_PREFIX):
                return (f"{table} is the runtime's own table: an object's SQL may not "
                        f"use it (ctx.storage's key-value and alarm calls do)")
    return None
