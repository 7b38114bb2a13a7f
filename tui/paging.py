"""Paging a server listing for one view: queries, a page cache, live refreshes. Pure.

No Textual and no socket in here: the view hands a `Pager` a function that
fetches `(query, offset, limit)` and gets back the page it shows, the total, and
whether what it shows is current. Positions are what the operator reads ("101-200
of 350"); the server pages by key (a page starts after the cursor of the row before
it), and `Bookmarks` turn one into the other behind that function (`Fetch`): the
cursor of every tenth row an answer carried is kept by position, and a fetch at a
position starts from the nearest bookmark at or before it. Deep in a listing that
changes, a position reached through an older bookmark is approximate ("about").

A page of alarms is a round trip to a server that may be busy (20-95 ms under
load), and a key waiting for it feels slow. So after a page move the view fetches
a window of pages in one query: the page shown, one behind it and two ahead in
the direction it last moved. The next page is then usually here when its key
comes: the view shows it at once and fetches the window around it, which
refreshes it (a cached page is shown for one round trip at most).

Between moves the page shown is kept live: a frame that touches the view's kind
(or a paced timer) asks for a refresh, and `RefreshGate` turns those asks into
fetches: at most one in flight per view, asks that come meanwhile coalesced into
one more fetch when it lands, no closer together than `min_gap_s`, and never
longer apart than `max_age_s` while the view is shown.
"""

from __future__ import annotations

import bisect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

Rows = list[dict[str, Any]]
NEVER = float("-inf")


@dataclass(frozen=True)
class ListQuery:
    """What a view lists: a server listing, its text filter, its sort, fixed arguments
    (a state, a target) that the view always sends."""

    listing: str
    filter: str = ""
    sort: str | None = None  # None: the listing's own order (most urgent first)
    desc: bool = False
    fixed: tuple[tuple[str, Any], ...] = ()

    def args(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.fixed)
        if self.filter:
            out["filter"] = self.filter
        if self.sort is not None:
            out["sort"] = self.sort
            out["desc"] = self.desc
        return out

    def with_filter(self, text: str) -> ListQuery:
        return replace(self, filter=text)

    def with_sort(self, sort: str | None, desc: bool = False) -> ListQuery:
        return replace(self, sort=sort, desc=desc if sort is not None else False)

    @property
    def narrowed(self) -> bool:
        """Whether a filter or a sort of the operator's own is on."""
        return bool(self.filter) or self.sort is not None


@dataclass(frozen=True)
class Answer:
    rows: Rows
    total: int
    note: str | None = None  # what the server says the listing leaves out
    approximate: bool = False  # the rows' position is where they were, not where they are


Fetch = Callable[[ListQuery, int, int], Awaitable[Answer | None]]


@dataclass(frozen=True)
class Page:
    rows: Rows
    total: int  # how many the whole listing held when the page was fetched
    at: float  # when it was fetched, seconds on any monotonic clock
    note: str | None = None
    approximate: bool = False


@dataclass
class Bookmarks:
    """Where rows of one listing start, as the server's cursors: position -> the cursor
    of the row just before it, and the listing's total when that was learnt.

    Kept for every `every`-th position an answer covered and for its end, so a fetch
    at a page boundary (pages are multiples of ten) starts exactly at a bookmark;
    at most `limit` of them (the farthest from the last answer go first).
    """

    every: int = 10
    limit: int = 20_000
    _positions: list[int] = field(default_factory=list)
    _marks: dict[int, tuple[Any, int]] = field(default_factory=dict)

    def learn(self, start: int, cursors: Sequence[Any], total: int) -> None:
        """An answer at `start` carried these cursors (one per row)."""
        for i, cursor in enumerate(cursors, 1):
            pos = start + i
            if pos % self.every == 0 or i == len(cursors):
                if pos not in self._marks:
                    bisect.insort(self._positions, pos)
                self._marks[pos] = (cursor, total)
        end = start + len(cursors)

        def distance(pos: int) -> int:  # from the rows just learnt
            return 0 if start <= pos <= end else min(abs(pos - start), abs(pos - end))

        while len(self._positions) > self.limit:
            first, last = self._positions[0], self._positions[-1]
            far = first if distance(first) >= distance(last) else last
            self._positions.remove(far)
            del self._marks[far]

    def nearest(self, offset: int) -> tuple[int, Any, int | None]:
        """(position, cursor, total then) of the nearest bookmark at or before `offset`;
        (0, None, None) when there is none (the listing's start)."""
        i = bisect.bisect_right(self._positions, offset)
        if i == 0:
            return 0, None, None
        pos = self._positions[i - 1]
        cursor, total = self._marks[pos]
        return pos, cursor, total

    def __len__(self) -> int:
        return len(self._positions)


@dataclass
class PageCache:
    size: int = 100
    behind: int = 1  # pages fetched behind the one shown
    ahead: int = 2  # and ahead of it, in the direction of the last move
    max_age_s: float = 10.0
    _query: ListQuery | None = None
    _generation: int = 0
    _pages: dict[int, Page] = field(default_factory=dict)

    def window(self, offset: int, direction: int = 1) -> tuple[int, int]:
        """The (offset, limit) to fetch for the page at `offset`: it and its neighbours."""
        back, forth = (self.behind, self.ahead) if direction >= 0 else (self.ahead, self.behind)
        start = max(0, offset - back * self.size)
        return start, offset + (forth + 1) * self.size - start

    def store(self, query: ListQuery, generation: int, start: int, limit: int,
              answer: Answer, now: float) -> None:
        """Keep the pages of an answer to (`start`, `limit`). All of them are exact,
        the ones past the end of the listing too (short or empty). An answer for
        another query or generation replaces every page; one for the same keeps the
        pages it does not cover (they age out), so a live refresh of the page shown
        leaves its neighbours. What the console holds stays bounded however far it
        pages: pages older than `max_age_s` are dropped."""
        if (query, generation) != (self._query, self._generation):
            self._query, self._generation, self._pages = query, generation, {}
        self._pages = {o: p for o, p in self._pages.items() if now - p.at <= self.max_age_s}
        for offset in range(start, start + limit, self.size):
            chunk = list(answer.rows[offset - start:offset - start + self.size])
            self._pages[offset] = Page(chunk, answer.total, now, answer.note,
                                       answer.approximate)

    def get(self, query: ListQuery, generation: int, offset: int, now: float) -> Page | None:
        """The page at `offset` for `query`, if one was fetched in the last `max_age_s`."""
        if (query, generation) != (self._query, self._generation):
            return None
        page = self._pages.get(offset)
        if page is None or now - page.at > self.max_age_s:
            return None
        return page

    def clear(self) -> None:
        """Forget every page (the server may have changed under them: a reconnect)."""
        self._query, self._pages = None, {}


@dataclass
class RefreshGate:
    """When a view fetches its page again. The view calls `ask` whenever its page may
    be stale, `started` and `finished` around each fetch, and follows `wait`."""

    min_gap_s: float = 0.5
    max_age_s: float = 2.0
    in_flight: bool = False
    wanted: bool = False
    urgent: bool = False  # a key asked: no gap
    last_start: float = NEVER

    def ask(self, urgent: bool = False) -> None:
        self.wanted = True
        self.urgent = self.urgent or urgent

    def started(self, now: float) -> None:
        self.in_flight, self.wanted, self.urgent, self.last_start = True, False, False, now

    def finished(self) -> None:
        self.in_flight = False

    def wait(self, now: float) -> float | None:
        """Seconds until a fetch should start (0: now); None while one is in flight (the
        view asks again when it lands)."""
        if self.in_flight:
            return None
        if not self.wanted:
            return max(0.0, self.last_start + self.max_age_s - now)  # paced: never too old
        if self.urgent:
            return 0.0
        return max(0.0, self.last_start + self.min_gap_s - now)


@dataclass
class Shown:
    """The page a `Pager` shows now."""

    rows: Rows
    total: int
    note: str | None = None
    approximate: bool = False  # its position is about right (say "about")


class Pager:
    """One view's paging of one listing: the query, the page shown, the cache, the gate.

    `generation` changes when what the server said before no longer counts (a
    reconnect): pages of an older generation are never shown.
    """

    def __init__(self, query: ListQuery, size: int = 100, *, behind: int = 1,
                 ahead: int = 2) -> None:
        self.query = query
        self.size = size
        self.offset = 0
        self.direction = 1
        self.generation = 0
        self.shown = Shown([], 0)
        self.shown_generation = 0  # the generation `shown` was fetched in
        self.shown_for: tuple[ListQuery, int] | None = None  # (query, offset) of `shown`
        self.loaded = False  # an answer for the current query has been shown
        self.error: str | None = None  # the server's last refusal of this query
        self.cache = PageCache(size=size, behind=behind, ahead=ahead)
        self.gate = RefreshGate()

    # -- what the view asks for ---------------------------------------------------------

    def set_query(self, query: ListQuery) -> None:
        """Another filter or sort: from the first page, nothing cached."""
        self.query, self.offset, self.direction = query, 0, 1
        self.cache.clear()
        self.loaded, self.error = False, None
        self.gate.ask(urgent=True)

    def new_generation(self) -> None:
        self.generation += 1
        self.cache.clear()
        self.gate.ask(urgent=True)

    def move(self, step: int, now: float) -> bool:
        """Move `step` pages; True when the page moved. The page comes from the cache
        when it is there (the view shows it at once), else `shown` is kept until the
        fetch the gate now asks for lands."""
        start = max(0, self.offset + step * self.size)
        if start == self.offset or (step > 0 and start >= max(self.shown.total, 1)):
            return False
        self.offset, self.direction = start, step
        page = self.cache.get(self.query, self.generation, start, now)
        if page is not None:
            self.shown = Shown(page.rows, page.total, page.note, page.approximate)
            self.shown_for = (self.query, start)
        self.gate.ask(urgent=True)
        return True

    def home(self, now: float) -> bool:
        return self.move(-self.offset // self.size, now) if self.offset else False

    # -- fetching -----------------------------------------------------------------------

    def request(self, wide: bool) -> tuple[ListQuery, int, int, int]:
        """What to fetch now: (query, generation, offset, limit). `wide`: the window
        around the page (after a move), else the page shown only (a live refresh)."""
        if wide:
            start, limit = self.cache.window(self.offset, self.direction)
        else:
            start, limit = self.offset, self.size
        return self.query, self.generation, start, limit

    def land(self, asked: tuple[ListQuery, int, int, int], answer: Answer | None,
             now: float, error: str | None = None) -> bool:
        """Keep an answer; True when the page shown changed to it (False: the fetch
        failed, or the view moved or changed its query meanwhile)."""
        query, generation, start, limit = asked
        if answer is None:
            if error is not None and (query, generation) == (self.query, self.generation):
                self.error = error
            return False
        self.cache.store(query, generation, start, limit, answer, now)
        page = self.cache.get(self.query, self.generation, self.offset, now)
        if page is None:
            return False
        self.shown = Shown(page.rows, page.total, page.note, page.approximate)
        self.shown_for = (self.query, self.offset)
        self.shown_generation = generation
        self.loaded, self.error = True, None
        if not page.rows and self.offset and page.total:
            # The listing shrank under the page shown: show its last page instead.
            self.offset = max(0, (page.total - 1) // self.size * self.size)
            self.gate.ask(urgent=True)
        return True

    @property
    def current(self) -> bool:
        """Whether `shown` is the page asked for (not still the one before a move)."""
        return self.shown_for == (self.query, self.offset)

    def span(self) -> tuple[int, int, int]:
        """(first, last, total) of the page shown, 1-based: (0, 0, 0) when empty."""
        total, n = self.shown.total, len(self.shown.rows)
        if not n:
            return 0, 0, total
        return self.offset + 1, self.offset + n, total

