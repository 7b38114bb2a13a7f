"""Object SQL written for SQLite, run on PostgreSQL: `?` placeholders become `$n`.

Pure text work: a `?` inside a string literal, a quoted identifier, a comment or a
dollar-quoted string is left alone; every other `?` is the next parameter. (The
portable subset of the README has no `?` operator, PostgreSQL's JSON "has key".)
"""

from __future__ import annotations

import re

_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


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


def rows_written(status: str) -> int:
    """Rows a statement changed, from PostgreSQL's command tag ('INSERT 0 3', 'UPDATE 2')."""
    parts = status.split()
    if parts and parts[0] in ("INSERT", "UPDATE", "DELETE", "MERGE") and parts[-1].isdigit():
        return int(parts[-1])
    return 0
