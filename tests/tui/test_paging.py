"""Paging a server listing for one view (pure: no Textual, no server): the page cache,
the pager's moves and answers, and the gate that paces its live refreshes."""

from __future__ import annotations

from typing import Any

import pytest

from alarmtop.tui.paging import Answer, Bookmarks, ListQuery, PageCache, Pager, RefreshGate

QUERY = ListQuery("alarms", fixed=(("state", "pending"),))


def rows(first: int, n: int) -> list[dict[str, Any]]:
    return [{"object": f"Flaky/p{i:04d}"} for i in range(first, first + n)]


def names_of(rs: list[dict[str, Any]]) -> list[str]:
    return [r["object"] for r in rs]


def names(page: Any) -> list[str]:
    assert page is not None
    return [r["object"] for r in page.rows]


# -- the query ------------------------------------------------------------------------------


def test_a_query_sends_its_filter_sort_and_fixed_arguments() -> None:
    assert QUERY.args() == {"state": "pending"}
    q = QUERY.with_filter("tenant").with_sort("due", desc=True)
    assert q.args() == {"state": "pending", "filter": "tenant", "sort": "due", "desc": True}
    assert q.narrowed and not QUERY.narrowed
    assert q.with_sort(None).args() == {"state": "pending", "filter": "tenant"}


# -- the cache ------------------------------------------------------------------------------


def test_the_window_leans_the_way_the_view_last_moved() -> None:
    cache = PageCache(size=100, behind=1, ahead=2)
    assert cache.window(500, 1) == (400, 400)  # pages 4..7 for page 5, going down
    assert cache.window(500, -1) == (300, 400)  # pages 3..6, going up
    assert cache.window(0, 1) == (0, 300)  # nothing before the first page
    assert cache.window(100, -1) == (0, 300)


def test_an_answer_is_split_into_its_pages() -> None:
    cache = PageCache(size=100)
    cache.store(QUERY, 0, 400, 400, Answer(rows(400, 400), 10_000), now=0.0)
    for offset in (400, 500, 600, 700):
        page = cache.get(QUERY, 0, offset, now=1.0)
        assert names(page) == names_of(rows(offset, 100))
        assert page is not None and page.total == 10_000
    assert cache.get(QUERY, 0, 300, now=1.0) is None
    assert cache.get(QUERY, 0, 800, now=1.0) is None


def test_pages_past_the_end_are_short_or_empty_not_missing() -> None:
    """Past the end of the listing the answer is short: the last page has what is left
    and a page after it is known to be empty (the view shows it so, at once)."""
    cache = PageCache(size=100)
    cache.store(QUERY, 0, 100, 400, Answer(rows(100, 130), 230), now=0.0)
    assert names(cache.get(QUERY, 0, 100, now=0.0)) == names_of(rows(100, 100))
    assert names(cache.get(QUERY, 0, 200, now=0.0)) == names_of(rows(200, 30))
    assert names(cache.get(QUERY, 0, 300, now=0.0)) == []


def test_another_query_or_generation_is_not_answered_from_the_last() -> None:
    """Another filter, sort or state, or another connection (generation), is fetched
    again."""
    cache = PageCache(size=100)
    cache.store(QUERY, 0, 0, 300, Answer(rows(0, 300), 1000), now=0.0)
    assert cache.get(QUERY.with_filter("Lease"), 0, 100, now=0.0) is None
    assert cache.get(QUERY.with_sort("due"), 0, 100, now=0.0) is None
    assert cache.get(ListQuery("alarms", fixed=(("state", "dead"),)), 0, 100, now=0.0) is None
    assert cache.get(QUERY, 1, 100, now=0.0) is None
    assert cache.get(QUERY, 0, 100, now=0.0) is not None


def test_old_pages_are_not_shown() -> None:
    cache = PageCache(size=100, max_age_s=10.0)
    cache.store(QUERY, 0, 0, 300, Answer(rows(0, 300), 1000), now=100.0)
    assert cache.get(QUERY, 0, 100, now=110.0) is not None
    assert cache.get(QUERY, 0, 100, now=110.5) is None


def test_a_refresh_of_one_page_keeps_its_fresh_neighbours_and_drops_old_ones() -> None:
    """A live refresh fetches the page shown only: the pages fetched around it stay
    (while fresh), so the next page key still shows at once; paging through 100,000
    alarms keeps only pages younger than `max_age_s`."""
    cache = PageCache(size=100, max_age_s=10.0)
    cache.store(QUERY, 0, 0, 300, Answer(rows(0, 300), 100_000), now=0.0)
    cache.store(QUERY, 0, 0, 100, Answer(rows(1, 100), 100_000), now=5.0)
    assert names(cache.get(QUERY, 0, 0, now=5.0)) == names_of(rows(1, 100))
    assert names(cache.get(QUERY, 0, 100, now=5.0)) == names_of(rows(100, 100))
    cache.store(QUERY, 0, 500, 100, Answer(rows(500, 100), 100_000), now=11.0)
    assert cache.get(QUERY, 0, 100, now=11.0) is None
    assert cache.get(QUERY, 0, 0, now=11.0) is not None  # refreshed at 5.0
    cache.clear()
    assert cache.get(QUERY, 0, 0, now=11.0) is None


# -- the pager ------------------------------------------------------------------------------


def landed(pager: Pager, total: int, now: float, wide: bool = True) -> bool:
    asked = pager.request(wide)
    _, _, start, limit = asked
    return pager.land(asked, Answer(rows(start, max(0, min(limit, total - start))), total),
                      now)


def test_a_move_shows_the_page_fetched_ahead_at_once() -> None:
    pager = Pager(QUERY, size=100)
    assert landed(pager, 350, now=0.0)
    assert pager.span() == (1, 100, 350) and pager.current
    assert pager.move(1, now=0.1)
    assert pager.span() == (101, 200, 350) and pager.current  # from the cache
    assert names_of(pager.shown.rows) == names_of(rows(100, 100))
    assert pager.move(1, now=0.2) and pager.current  # pages 1-3 came in the first answer
    assert pager.move(1, now=0.3) and not pager.current  # page 4 did not
    assert pager.shown.rows[0]["object"] == "Flaky/p0200"  # still page 3 until it lands
    assert landed(pager, 350, now=0.4) and pager.span() == (301, 350, 350)
    assert not pager.move(1, now=0.5)  # nothing after the last page


def test_an_answer_for_a_page_left_meanwhile_does_not_show() -> None:
    pager = Pager(QUERY, size=100)
    asked = pager.request(wide=False)  # page 1, in flight
    landed(pager, 1000, now=0.0)
    pager.move(5, now=0.1)
    assert not pager.land(asked, Answer(rows(0, 100), 1000), now=0.2)


def test_a_listing_that_shrank_under_the_page_goes_to_its_last_page() -> None:
    pager = Pager(QUERY, size=100)
    landed(pager, 1000, now=0.0)
    pager.move(9, now=0.1)
    landed(pager, 1000, now=0.2)
    assert pager.span() == (901, 1000, 1000)
    landed(pager, 250, now=0.3, wide=False)  # 750 rows went
    assert pager.offset == 200 and pager.gate.urgent


def test_a_new_query_starts_at_the_first_page_and_a_refusal_is_kept() -> None:
    pager = Pager(QUERY, size=100)
    landed(pager, 1000, now=0.0)
    pager.move(3, now=0.1)
    pager.set_query(QUERY.with_sort("due"))
    assert pager.offset == 0 and not pager.loaded and pager.gate.urgent
    assert not pager.land(pager.request(True), None, now=0.2, error="too many rows")
    assert pager.error == "too many rows"


# -- the gate -------------------------------------------------------------------------------


def test_the_gate_lets_one_fetch_fly_and_coalesces_the_asks_meanwhile() -> None:
    gate = RefreshGate(min_gap_s=0.5, max_age_s=2.0)
    gate.ask()
    assert gate.wait(10.0) == 0
    gate.started(10.0)
    for _ in range(5):  # frames while it flies
        gate.ask()
    assert gate.wait(10.1) is None
    gate.finished()
    assert gate.wait(10.2) == pytest.approx(0.3)
    assert gate.wait(10.5) == 0
    gate.started(10.5)
    gate.finished()
    assert gate.wait(10.6) == pytest.approx(1.9)  # paced: never older than max_age_s


def test_a_key_does_not_wait_for_the_gap() -> None:
    gate = RefreshGate(min_gap_s=0.5)
    gate.started(10.0)
    gate.finished()
    gate.ask(urgent=True)
    assert gate.wait(10.05) == 0


# -- bookmarks: positions to the server's cursors ---------------------------------------------


def test_bookmarks_keep_every_tenth_cursor_and_the_end_of_an_answer() -> None:
    marks = Bookmarks()
    assert marks.nearest(500) == (0, None, None)  # nothing known: from the start
    marks.learn(100, [[i] for i in range(100, 135)], total=350)
    assert len(marks) == 4  # 110, 120, 130 and the answer's end, 135
    assert marks.nearest(120) == (120, [119], 350)  # the page at 120 starts after row 119
    assert marks.nearest(129) == (120, [119], 350)
    assert marks.nearest(500) == (135, [134], 350)
    assert marks.nearest(99) == (0, None, None)
    marks.learn(100, [[i] for i in range(100, 121)], total=351)
    assert marks.nearest(120) == (120, [119], 351)  # learnt again: the newer total


def test_bookmarks_are_bounded_keeping_those_near_the_last_answer() -> None:
    marks = Bookmarks(limit=12)
    for start in range(0, 1000, 100):
        marks.learn(start, [[i] for i in range(start, start + 100)], total=10_000)
    assert len(marks) == 12
    assert [marks.nearest(p)[0] for p in (1000, 940, 905, 890, 885)] == [
        1000, 940, 900, 890, 0]  # the last answer's span (900-1000), then the nearest
    marks.learn(0, [[i] for i in range(0, 100)], total=10_000)  # back at the top
    assert marks.nearest(95)[0] == 90 and marks.nearest(999)[0] < 1000


def test_an_approximate_answer_shows_as_approximate() -> None:
    pager = Pager(QUERY, size=100)
    asked = pager.request(wide=False)
    pager.land(asked, Answer(rows(0, 100), 1_000_000, approximate=True), now=0.0)
    assert pager.shown.approximate
    pager.land(asked, Answer(rows(0, 100), 1_000_000), now=1.0)
    assert not pager.shown.approximate
