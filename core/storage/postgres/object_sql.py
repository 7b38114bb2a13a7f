"""Object SQL written for SQLite, run on PostgreSQL behind its walls (pure text work).

`?` placeholders become `$n`: a `?` inside a string literal, a quoted identifier,
a comment or a dollar-quoted string is left alone; every other `?` is the next
parameter. (The portable subset of the README has no `?` operator, PostgreSQL's
JSON "has key".)

The walls (see `objects.py` and the schema's `object_sql_ready`): an object's
statement runs inside a SECURITY DEFINER function owned by the object's own role
(no rights on the runtime's schema nor on any other object's), where PostgreSQL
refuses SET ROLE, SET SESSION AUTHORIZATION and transaction control whatever path
they take. The function takes the statement's text and its parameters as text
(`$n` becomes a cast of the n-th element of one text array); the call names the
statement's result columns and types, read from the statement prepared first.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any, Protocol

_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")
_PARAM = re.compile(r"\$([0-9]+)")
_IDENT_CHAR = re.compile(r"[A-Za-z0-9_$\x80-\U0010ffff]")
WRAPPERS = "alarmtop_sql"  # the runtime's schema of the wrappers: no object may name it
_WRITES = ("INSERT", "UPDATE", "DELETE", "MERGE")


class PgType(Protocol):
    """What a statement's described types give (asyncpg's `Type`)."""

    @property
    def name(self) -> str: ...

    @property
    def schema(self) -> str: ...


def role_name(install: str, key: tuple[str, str]) -> str:
    """The object's own role: short (63 bytes at most), never shared by two objects, nor
    by two databases of one cluster (roles belong to the cluster)."""
    digest = hashlib.sha256(f"{install}\x00{key[0]}\x00{key[1]}".encode()).hexdigest()[:40]
    return f"alarmtop_o_{digest}"


def placeholders(sql: str) -> tuple[str, int]:
    """`sql` with its `?` placeholders numbered `$1`, `$2`, ...; and how many there were."""
    out: list[str] = []
    i, n, count = 0, len(sql), 0
    while i < n:
        c = sql[i]
        if c == "?":
            count += 1
            out.append(f"${count}")
            i += 1
        elif c in "'\"":
            end = _quoted_end(sql, i, c)
            out.append(sql[i:end])
            i = end
        elif c == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end + 1
            out.append(sql[i:end])
            i = end
        elif c == "/" and sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(sql[i:end])
            i = end
        elif c == "$" and (tag := _DOLLAR_TAG.match(sql, i)) is not None:
            close = sql.find(tag.group(0), tag.end())
            end = n if close < 0 else close + len(tag.group(0))
            out.append(sql[i:end])
            i = end
        else:
            out.append(c)
            i += 1
    return "".join(out), count


def _quoted_end(sql: str, start: int, quote: str) -> int:
    """The index after the literal or identifier that opens at `start` (a doubled quote
    inside it is the quote itself)."""
    i = start + 1
    while True:
        j = sql.find(quote, i)
        if j < 0:
            return len(sql)
        if j + 1 < len(sql) and sql[j + 1] == quote:
            i = j + 2
            continue
        return j + 1


def inner_statement(sql: str, types: Sequence[PgType]) -> str:
    """The statement as its wrapper runs it: each `$n` outside literals, quoted names,
    comments and dollar-quoted strings becomes the n-th text parameter cast back to
    the type the statement was prepared with."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"":
            end = _quoted_end(sql, i, c)
        elif c == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end + 1
        elif c == "/" and sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            end = n if end < 0 else end + 2
        elif c == "$" and (tag := _DOLLAR_TAG.match(sql, i)) is not None and \
                not (i and _IDENT_CHAR.match(sql[i - 1])):
            close = sql.find(tag.group(0), tag.end())
            end = n if close < 0 else close + len(tag.group(0))
        elif c == "$" and (param := _PARAM.match(sql, i)) is not None and \
                not (i and _IDENT_CHAR.match(sql[i - 1])):
            k = int(param.group(1))
            if not 1 <= k <= len(types):
                out.append(param.group(0))  # PostgreSQL says what is wrong with it
            else:
                out.append(f"CAST(($1)[{k}] AS {type_sql(types[k - 1])})")
            i = param.end()
            continue
        else:
            end = i + 1
        out.append(sql[i:end])
        i = end
    return "".join(out)


def type_sql(t: PgType) -> str:
    """The SQL name of a described type (an array's is its element's, then `[]`)."""
    name = t.name[:-2] if t.name.endswith("[]") else t.name
    suffix = "[]" if t.name.endswith("[]") else ""
    return f"{quote_ident(t.schema)}.{quote_ident(name)}{suffix}"


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def wrapped_call(role: str, params: Sequence[PgType], columns: Sequence[PgType]) -> str:
    """The runtime's call of the object's wrapper: `$1` the statement, `$2...` its
    parameters, each sent with its type and turned into text by PostgreSQL. A statement
    that returns rows names its columns (as c0, c1...: two may share a name); one that
    does not returns how many rows it changed."""
    args = ", ".join(f"${i + 2}::{type_sql(t)}::text" for i, t in enumerate(params))
    array = f"ARRAY[{args}]::text[]"
    if not columns:
        return f"SELECT {WRAPPERS}.{quote_ident('x_' + role)}($1::text, {array})"
    defs = ", ".join(f"c{i} {type_sql(t)}" for i, t in enumerate(columns))
    return f"SELECT * FROM {WRAPPERS}.{quote_ident('q_' + role)}($1::text, {array}) AS t({defs})"


# Types a column definition may not name: a statement whose columns are all `void`
# (`SELECT pg_notify(...)`) runs without its rows, which are rows of nothing.
PSEUDO_TYPES = frozenset({"void", "record", "_record", "unknown", "cstring", "internal",
                          "trigger", "event_trigger", "any", "anyelement", "anyarray",
                          "anynonarray", "anyenum", "anyrange", "anymultirange"})


def unnamed_columns(columns: Sequence[PgType]) -> str | None:
    """How a statement's result must run when its columns cannot all be named: "void"
    (every column is void: run it without rows), "refused" (a record column, say),
    None (they can)."""
    pseudo = [t.name for t in columns if t.schema == "pg_catalog" and t.name in PSEUDO_TYPES]
    if not pseudo:
        return None
    return "void" if len(pseudo) == len(columns) and set(pseudo) == {"void"} else "refused"


def leading_keyword(sql: str) -> str:
    """The statement's first word (after comments, blanks and opening parentheses)."""
    i, n = 0, len(sql)
    while i < n:
        if sql[i].isspace() or sql[i] == "(":
            i += 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j + 1
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            break
    m = re.match(r"[A-Za-z]+", sql[i:])
    return m.group(0).upper() if m else ""


def written(sql: str, rows: int, returned: bool) -> int:
    """Rows a statement changed, as its command tag would have said: the rows of a
    write (those it returned, with RETURNING), none for a read."""
    word = leading_keyword(sql)
    if returned:
        return rows if word in _WRITES else 0
    return rows if word in (*_WRITES, "WITH") else 0


# What PostgreSQL says when the walls hold, and what the object is told instead.
_REFUSALS = (
    ('cannot set parameter "role"', "SET ROLE is refused: an object's SQL runs as its own "
     "role, with rights on its own schema only"),
    ('cannot set parameter "session_authorization"', "SET SESSION AUTHORIZATION is refused: "
     "an object's SQL runs as its own role, with rights on its own schema only"),
    ("transaction commands", "transaction control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, "
     "PREPARE TRANSACTION) is refused: the event's writes are one transaction, committed "
     "by the runtime; group writes with `async with ctx.storage.transaction():`"),
    ("invalid transaction termination", "transaction control (a procedure's COMMIT or "
     "ROLLBACK) is refused: the event's writes are one transaction, committed by the "
     "runtime"),
    ("permission denied", "an object's SQL reaches its own schema only"),
)


def refusal(message: str) -> str | None:
    """alarmtop's words for an error the walls raised (None: not one of theirs)."""
    for found, said in _REFUSALS:
        if found in message:
            return f"{said} ({message})" if found == "permission denied" else said
    return None


def result_rows(records: Sequence[Any], names: Sequence[str]) -> list[dict[str, Any]]:
    """The wrapper's rows (columns c0, c1...) keyed by the statement's own column names."""
    return [dict(zip(names, r, strict=True)) for r in records]


def rows_written(status: str) -> int:
    """Rows a statement changed, from PostgreSQL's command tag ('INSERT 0 3', 'UPDATE 2')."""
    parts = status.split()
    if parts and parts[0] in ("INSERT", "UPDATE", "DELETE", "MERGE") and parts[-1].isdigit():
        return int(parts[-1])
    return 0
