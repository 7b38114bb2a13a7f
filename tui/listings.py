"""The server's listings behind the console's one paging abstraction (`paging.Fetch`).

Views page through `(ListQuery, offset, limit)`; this turns that into the ops
query of the listing and its answer into rows and a total. The server pages by
key where an index serves the order (its answer then carries each row's cursor):
a fetch at a position starts after the nearest bookmarked cursor at or before it
(`paging.Bookmarks`, one set per query), with the few rows between skipped by
`offset`. A listing the server builds by a bounded sort (its answer has no
cursors) is paged by offset, as is any listing of a server that does not know
`after`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from alarmtop.tui.client import CommandError, Disconnected, OpsClient
from alarmtop.tui.paging import Answer, Bookmarks, ListQuery

MAX_LIMIT = 500  # the server's largest page (server/wire.py MAX_PAGE)
QUERIES_KEPT = 16  # queries whose bookmarks are kept (the views' and their last filters)


class ServerListings:
    """Fetches pages of listings; remembers the server's last refusal of each."""

    def __init__(self, client: OpsClient) -> None:
        self.client = client
        self.refused: dict[str, str] = {}
        self.bookmarks: OrderedDict[ListQuery, Bookmarks] = OrderedDict()

    async def fetch(self, query: ListQuery, offset: int, limit: int) -> Answer | None:
        """A page, or None: refused (`refused[query.listing]` says why) or not
        connected (the header says so)."""
        marks = self._marks(query)
        base, after, then = marks.nearest(offset)
        args: dict[str, Any] = {"offset": offset - base, "limit": min(limit, MAX_LIMIT),
                                **query.args()}
        if after is not None:
            args["after"] = after
        try:
            data = await self.client.request(query.listing, **args)
        except CommandError as exc:
            if after is not None and "after" in str(exc):
                # A server that pages only by offset (or a cursor it no longer takes):
                # forget the bookmarks and ask by position.
                self.bookmarks.pop(query, None)
                return await self.fetch(query, offset, limit)
            self.refused[query.listing] = str(exc)
            return None
        except (Disconnected, TimeoutError):
            return None
        self.refused.pop(query.listing, None)
        rows = list(data.get("rows") or [])
        total = int(data.get("total", offset + len(rows)))
        cursors = data.get("cursors")
        if isinstance(cursors, list) and len(cursors) == len(rows):
            marks.learn(offset, cursors, total)
        # From a bookmark learnt when the listing held another total, rows may have come
        # or gone before it: the position shown is where they were.
        approximate = after is not None and then != total
        return Answer(rows, total, data.get("note"), approximate)

    def _marks(self, query: ListQuery) -> Bookmarks:
        marks = self.bookmarks.pop(query, None) or Bookmarks()
        self.bookmarks[query] = marks
        while len(self.bookmarks) > QUERIES_KEPT:
            self.bookmarks.popitem(last=False)
        return marks
