"""The pages a view keeps around the one it shows (pure: no Textual, no server)."""

from __future__ import annotations

from typing import Any

from alarmtop.tui.paging import PageCache

QUERY = ("pending", None, 1)


def rows(first: int, n: int) -> list[dict[str, Any]]:
    return [{"object": f"Flaky/p{i:04d}"} for i in range(first, first + n)]


def names_of(rs: list[dict[str, Any]]) -> list[str]:
    return [r["object"] for r in rs]


def names(page: Any) -> list[str]:
    assert page is not None
    return [r["object"] for r in page.rows]


def test_the_window_leans_the_way_the_view_last_moved() -> None:
    cache = PageCache(size=100, behind=1, ahead=2)
    assert cache.window(500, 1) == (400, 400)  # pages 4..7 for page 5, going down
    assert cache.window(500, -1) == (300, 400)  # pages 3..6, going up
    assert cache.window(0, 1) == (0, 300)  # nothing before the first page
    assert cache.window(100, -1) == (0, 300)


def test_an_answer_is_split_into_its_pages() -> None:
    cache = PageCache(size=100)
    cache.store(QUERY, 400, 400, rows(400, 400), 10_000, now=0.0)
    for offset in (400, 500, 600, 700):
        page = cache.get(QUERY, offset, now=1.0)
        assert names(page) == names_of(rows(offset, 100))
        assert page is not None and page.total == 10_000
    assert cache.get(QUERY, 300, now=1.0) is None
    assert cache.get(QUERY, 800, now=1.0) is None


def test_pages_past_the_end_are_short_or_empty_not_missing() -> None:
    """Past the end of the listing the answer is short: the last page has what is left
    and a page after it is known to be empty (the view shows it so, at once)."""
    cache = PageCache(size=100)
    cache.store(QUERY, 100, 400, rows(100, 130), 230, now=0.0)
    assert names(cache.get(QUERY, 100, now=0.0)) == names_of(rows(100, 100))
    assert names(cache.get(QUERY, 200, now=0.0)) == names_of(rows(200, 30))
    assert names(cache.get(QUERY, 300, now=0.0)) == []


def test_another_query_is_not_answered_from_the_pages_of_the_last() -> None:
    """Another filter, state or connection (the snapshot count) is fetched again."""
    cache = PageCache(size=100)
    cache.store(QUERY, 0, 300, rows(0, 300), 1000, now=0.0)
    assert cache.get(("pending", "Lease", 1), 100, now=0.0) is None
    assert cache.get(("dead", None, 1), 100, now=0.0) is None
    assert cache.get(("pending", None, 2), 100, now=0.0) is None
    assert cache.get(QUERY, 100, now=0.0) is not None


def test_old_pages_are_not_shown() -> None:
    cache = PageCache(size=100, max_age_s=10.0)
    cache.store(QUERY, 0, 300, rows(0, 300), 1000, now=100.0)
    assert cache.get(QUERY, 100, now=110.0) is not None
    assert cache.get(QUERY, 100, now=110.5) is None


def test_only_the_last_answer_is_kept() -> None:
    """Paging through 100,000 alarms must not keep them all: a new answer replaces the
    pages of the last one."""
    cache = PageCache(size=100)
    cache.store(QUERY, 0, 300, rows(0, 300), 100_000, now=0.0)
    cache.store(QUERY, 100, 400, rows(100, 400), 100_000, now=1.0)
    assert cache.get(QUERY, 0, now=1.0) is None
    assert names(cache.get(QUERY, 400, now=1.0)) == names_of(rows(400, 100))
    cache.clear()
    assert cache.get(QUERY, 400, now=1.0) is None
