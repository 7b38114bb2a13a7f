"""Sorting, filtering and paging of the listings the ops queries give (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from alarmtop.server.listing import (
    MAX_SCAN,
    CountCache,
    ListingError,
    alarm_urgency,
    check_scan,
    check_sort,
    contains,
    is_default,
    keyed_order,
    resident_in_page,
    sort_rows,
    window,
)

NOW = 1_800_000_000_000


def alarm(name: str, state: str = "pending", due: int | None = NOW, retry: int = 0,
          near: bool = False, error: str | None = None) -> dict[str, Any]:
    return {"object": f"F/{name}", "object_class": "F", "object_name": name, "state": state,
            "next_attempt_ms": due, "retry_count": retry, "near_exhaustion": near,
            "last_error": error}


def names(rows: list[dict[str, Any]]) -> list[str]:
    return [r["object_name"] for r in rows]


def test_sorting_by_due_time_uses_the_time_not_the_text() -> None:
    """'in 51m' is later than 'in 6.0s': by the due time in ms, soonest first; alarms that
    have no due time of their own (dead, retrying) come last either way."""
    rows = [alarm("later", due=NOW + 51 * 60_000), alarm("dead", "dead", due=None),
            alarm("soon", due=NOW + 6_000), alarm("retrying", "retrying", due=NOW + 1)]
    assert names(sort_rows("alarms", rows, "due", False)) == ["soon", "later", "dead",
                                                               "retrying"]
    assert names(sort_rows("alarms", rows, "due", True)) == ["later", "soon", "dead",
                                                              "retrying"]


def test_sorting_by_retry_count_is_numeric() -> None:
    rows = [alarm("a", retry=10), alarm("b", retry=9), alarm("c", retry=2)]
    assert names(sort_rows("alarms", rows, "retry", False)) == ["c", "b", "a"]


def test_next_try_is_for_retrying_and_near_exhaustion_only() -> None:
    rows = [alarm("p", due=NOW), alarm("r", "retrying", due=NOW + 5),
            alarm("n", "running", due=NOW + 2, near=True)]
    assert names(sort_rows("alarms", rows, "next", False)) == ["n", "r", "p"]


def test_the_urgency_order_is_the_alarm_index_order() -> None:
    """Dead, retrying (more retries first), running, pending by due time."""
    rows = [alarm("p2", due=NOW + 2), alarm("run", "running"), alarm("r1", "retrying", retry=1),
            alarm("d", "dead", due=None), alarm("r5", "retrying", retry=5),
            alarm("p1", due=NOW + 1)]
    assert names(sorted(rows, key=alarm_urgency)) == ["d", "r5", "r1", "run", "p1", "p2"]


def test_an_audit_sort_by_time_is_by_its_sequence() -> None:
    rows = [{"seq": 2, "actor": "b"}, {"seq": 10, "actor": "a"}, {"seq": 1, "actor": "c"}]
    assert [r["seq"] for r in sort_rows("audit", rows, "when", True)] == [10, 2, 1]
    assert [r["seq"] for r in sort_rows("audit", rows, "who", False)] == [10, 2, 1]


def test_fault_ids_sort_by_number() -> None:
    rows = [{"id": "f10"}, {"id": "f9"}, {"id": "f1"}]
    assert [r["id"] for r in sort_rows("faults", rows, "id", False)] == ["f1", "f9", "f10"]


def test_an_unknown_sort_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ListingError, match="sort is one of state, object, due"):
        check_sort("alarms", "due_in")
    assert check_sort("alarms", None) == "state"


def test_the_default_order_is_the_one_storage_pages_in() -> None:
    assert is_default("alarms", None, None) and is_default("alarms", "state", False)
    assert not is_default("alarms", "state", True) and not is_default("alarms", "due", False)
    assert is_default("audit", None, True) and not is_default("audit", None, False)


def test_a_scan_of_too_many_rows_is_refused_with_what_to_do() -> None:
    check_scan("alarms", MAX_SCAN, "sorting by due")
    with pytest.raises(ListingError, match="narrow it with a filter"):
        check_scan("alarms", MAX_SCAN + 1, "sorting by due")


def test_contains_and_window() -> None:
    assert contains(None, "x") and contains("", None)
    assert contains("ten", None, "LeaseLedger/tenant-7") and not contains("Ten", "tenant")
    assert window([1, 2, 3, 4, 5], 1, 2) == [2, 3] and window([1], 5, 2) == []


# -- keyed listings: which sorts an index serves, totals kept a moment, residents merged --


def test_the_keyed_orders_are_the_default_ones_and_by_object() -> None:
    assert keyed_order("alarms", "state") == "urgency"
    assert keyed_order("alarms", "object") == "object"
    assert keyed_order("alarms", "due") is None
    assert keyed_order("audit", "when") == "seq" and keyed_order("faults", "id") is None


def test_a_walked_total_is_reused_while_nothing_changed_or_for_a_moment() -> None:
    cache = CountCache(max_age_s=2.0, cheap=100)
    v1, v2 = object(), object()
    assert cache.get(("alarms", "x"), v1, 1000, 0.0) is None
    cache.put(("alarms", "x"), v1, 0.0, 7)
    assert cache.get(("alarms", "x"), v1, 1000, 60.0) == 7  # nothing committed since
    assert cache.get(("alarms", "x"), v2, 1000, 1.5) == 7  # changed, but a moment ago
    assert cache.get(("alarms", "x"), v2, 1000, 2.5) is None
    assert cache.get(("alarms", "x"), v1, 50, 0.0) is None  # small: always counted


def test_resident_objects_join_the_page_they_fall_on() -> None:
    page = [("Q", "b"), ("Q", "d")]
    residents = [("A", "z"), ("Q", "c"), ("Q", "e"), ("Q", "d")]
    assert resident_in_page(page, residents, None, 2, False) == [("A", "z"), ("Q", "c")]
    assert resident_in_page(page, residents, ("Q", "a"), 2, False) == [("Q", "c")]
    assert resident_in_page(page, residents, ("Q", "a"), 5, False) == [("Q", "c"), ("Q", "e")]
    down = [("Q", "d"), ("Q", "b")]
    assert resident_in_page(down, residents, ("Q", "z"), 2, True) == [("Q", "c"), ("Q", "e")]
    assert resident_in_page(down, residents, ("Q", "dd"), 2, True) == [("Q", "c")]
