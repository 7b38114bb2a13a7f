"""Pages of a server listing kept around the one shown, so that paging shows at once.

Pure, no Textual. A page of alarms is a round trip to a server that may be busy
(20-95 ms under load), and a key waiting for it feels slow. So a view fetches a
window of pages in one query: the page shown, one behind it and two ahead in the
direction it last moved. The next page is then usually here when its key comes:
the view shows it at once and fetches the window around it, which refreshes it
(a cached page is shown for one round trip at most) and the pages next to it.

Only the pages of the last answer are kept, for one query (a state, a filter) and
for `max_age_s`: another query, or an old answer, is fetched again before it is
shown.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class Page:
    rows: Rows
    total: int  # how many the whole listing held when the page was fetched
    at: float  # when it was fetched, seconds on any monotonic clock


@dataclass
class PageCache:
    size: int = 100
    behind: int = 1  # pages fetched behind the one shown
    ahead: int = 2  # and ahead of it, in the direction of the last move
    max_age_s: float = 10.0
    _query: Hashable = None
    _pages: dict[int, Page] = field(default_factory=dict)

    def window(self, offset: int, direction: int = 1) -> tuple[int, int]:
        """The (offset, limit) to fetch for the page at `offset`: it and its neighbours."""
        back, forth = (self.behind, self.ahead) if direction >= 0 else (self.ahead, self.behind)
        start = max(0, offset - back * self.size)
        return start, offset + (forth + 1) * self.size - start

    def store(self, query: Hashable, start: int, limit: int, rows: Sequence[dict[str, Any]],
              total: int, now: float) -> None:
        """Keep the pages of an answer to (`start`, `limit`), and only those: all of them
        are exact, the ones past the end of the listing too (short or empty), and
        what the console holds stays bounded however far it pages."""
        self._query, self._pages = query, {}
        for offset in range(start, start + limit, self.size):
            chunk = list(rows[offset - start:offset - start + self.size])
            self._pages[offset] = Page(chunk, total, now)

    def get(self, query: Hashable, offset: int, now: float) -> Page | None:
        """The page at `offset` for `query`, if one was fetched in the last `max_age_s`."""
        page = self._pages.get(offset) if query == self._query else None
        if page is None or now - page.at > self.max_age_s:
            return None
        return page

    def clear(self) -> None:
        """Forget every page (the server may have changed under them: a reconnect)."""
        self._query, self._pages = None, {}
