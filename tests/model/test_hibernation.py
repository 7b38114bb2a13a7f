"""The hibernation choice: which resident objects to evict, and when to look again."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from alarmtop.core.model.hibernation import ResidentView, choose_evictions, next_deadline

IDLE_MS = 10_000


def view(name: str, last_active_ms: int, busy: bool = False) -> ResidentView:
    return ResidentView(("C", name), last_active_ms, busy)


def keys(names: str) -> list[tuple[str, str]]:
    return [("C", n) for n in names]


def test_nothing_is_evicted_while_everyone_is_recent() -> None:
    residents = [view("a", 1000), view("b", 2000)]
    assert choose_evictions(residents, 5000, IDLE_MS, max_resident=10, live=2) == []


def test_objects_idle_for_hibernate_after_are_evicted() -> None:
    residents = [view("a", 0), view("b", 1000), view("c", 9000)]
    assert choose_evictions(residents, 11_000, IDLE_MS, max_resident=10, live=3) == keys("ab")


def test_idle_exactly_hibernate_after_counts() -> None:
    assert choose_evictions([view("a", 0)], IDLE_MS, IDLE_MS, 10, 1) == keys("a")
    assert choose_evictions([view("a", 1)], IDLE_MS, IDLE_MS, 10, 1) == []


def test_over_the_cap_the_least_recently_used_go_first() -> None:
    residents = [view("a", 100), view("b", 200), view("c", 300), view("d", 400)]
    assert choose_evictions(residents, 500, IDLE_MS, max_resident=2, live=4) == keys("ab")


def test_busy_objects_are_never_evicted() -> None:
    residents = [view("a", 0, busy=True), view("b", 0), view("c", 400)]
    assert choose_evictions(residents, 20_000, IDLE_MS, max_resident=1, live=3) == keys("bc")
    assert choose_evictions([view("a", 0, busy=True)], 99_999, IDLE_MS, 0, 1) == []


def test_idle_evictions_also_count_toward_the_cap() -> None:
    residents = [view("a", 0), view("b", 15_000), view("c", 16_000)]
    assert choose_evictions(residents, 20_000, IDLE_MS, max_resident=2, live=3) == keys("a")


def test_next_deadline_is_the_least_recently_used_idle_object() -> None:
    residents = [view("a", 100, busy=True), view("b", 300), view("c", 500)]
    assert next_deadline(residents, IDLE_MS) == 300 + IDLE_MS


def test_next_deadline_is_none_when_all_are_busy_or_none_are_resident() -> None:
    assert next_deadline([view("a", 0, busy=True)], IDLE_MS) is None
    assert next_deadline([], IDLE_MS) is None


residents_lru = st.lists(st.tuples(st.integers(0, 50_000), st.booleans()), max_size=12).map(
    lambda rows: [view(f"o{i}", t, busy)
                  for i, (t, busy) in enumerate(sorted(rows, key=lambda r: r[0]))])


@given(residents=residents_lru, now=st.integers(50_000, 80_000), cap=st.integers(0, 12))
def test_evictions_respect_busy_idle_and_cap(residents: list[ResidentView], now: int,
                                            cap: int) -> None:
    chosen = choose_evictions(residents, now, IDLE_MS, cap, len(residents))
    by_key = {r.key: r for r in residents}
    assert len(set(chosen)) == len(chosen)
    assert not any(by_key[k].busy for k in chosen)
    idle = [r.key for r in residents if not r.busy and now - r.last_active_ms >= IDLE_MS]
    assert set(idle) <= set(chosen)
    free = [r for r in residents if not r.busy]
    assert len(residents) - len(chosen) <= cap or len(chosen) == len(free)
    # LRU order: whatever is chosen is a prefix of the idle (not busy) residents.
    assert chosen == [r.key for r in free][:len(chosen)]
    deadline = next_deadline(residents, IDLE_MS)
    assert deadline == (free[0].last_active_ms + IDLE_MS if free else None)
