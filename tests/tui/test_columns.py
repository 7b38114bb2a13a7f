"""What each list view shows (`tui/columns.py`): widths that fit the terminal, the sort
cycle of `s` and `S`, the arrow, the badge."""

from __future__ import annotations

from alarmtop.tui.columns import (
    ALARMS,
    AUDIT,
    CELL_PAD,
    EXECUTIONS,
    SCROLLBAR,
    Column,
    badge,
    fit_widths,
    flex_width,
)
from alarmtop.tui.paging import ListQuery

Q = ListQuery("alarms")


def used(columns: tuple[Column, ...], widths: tuple[int, ...]) -> int:
    return sum(w + CELL_PAD for w in widths) + SCROLLBAR


def test_the_flexible_column_takes_what_the_others_leave() -> None:
    """At 220 columns the last error gets the whole rest of the line (it was cut at 48)."""
    wide = fit_widths(ALARMS.columns, 216)
    assert wide[:5] == (11, 34, 10, 6, 10)
    assert used(ALARMS.columns, wide) == 216  # to the last cell
    assert flex_width(ALARMS.columns, wide) == wide[5] == 131


def test_on_a_narrow_terminal_the_widest_columns_give_way_first() -> None:
    """At 80 columns the object column shrinks towards its minimum before the others and
    the table fits without scrolling sideways."""
    narrow = fit_widths(ALARMS.columns, 78)
    assert used(ALARMS.columns, narrow) <= 78
    assert narrow[1] < 34 and narrow[1] >= 20 and narrow[0] == 11
    assert narrow[5] >= 10


def test_the_audit_log_keeps_its_reason_in_sight_at_80_columns() -> None:
    """The reason (a snooze's "by 1d0h") was scrolled off the right edge at 80x24."""
    narrow = fit_widths(AUDIT.columns, 78)
    assert used(AUDIT.columns, narrow) <= 78
    assert narrow[-1] >= len("by 1d0h") and narrow[4] >= 11  # "snooze_tim…"


def test_columns_never_go_below_their_minimum() -> None:
    tiny = fit_widths(EXECUTIONS.columns, 30)
    assert tiny[1] == 24 and tiny[3] == 9 and tiny[2] == 10  # the table scrolls instead


def test_s_cycles_the_columns_and_comes_back_to_the_listings_own_order() -> None:
    q = Q
    seen = []
    for _ in range(len(ALARMS.sort_keys())):
        q = ALARMS.next_sort(q)
        seen.append(q.sort)
    assert seen == ["object", "due", "retry", "next", "error", None]
    assert not q.narrowed


def test_S_reverses_and_the_default_reversed_is_a_real_sort() -> None:
    due = ALARMS.next_sort(ALARMS.next_sort(Q))
    assert (due.sort, due.desc) == ("due", False)
    assert (ALARMS.reversed(due).sort, ALARMS.reversed(due).desc) == ("due", True)
    assert ALARMS.reversed(ALARMS.reversed(due)).desc is False
    urgent_last = ALARMS.reversed(Q)
    assert (urgent_last.sort, urgent_last.desc) == ("state", True)
    assert ALARMS.reversed(urgent_last).sort is None  # back to the listing's own order
    newest_first = ListQuery("audit")
    assert AUDIT.reversed(newest_first).args() == {"sort": "when", "desc": False}


def test_the_arrow_marks_the_sorted_column_and_the_default_one() -> None:
    assert ALARMS.arrow(Q) == (0, False)  # state, most urgent first
    assert ALARMS.arrow(Q.with_sort("retry", desc=True)) == (3, True)
    assert AUDIT.arrow(ListQuery("audit")) == (0, True)  # the newest first


def test_the_badge_says_what_is_on() -> None:
    assert badge(Q, ALARMS) == ""
    assert badge(Q.with_filter("tenant"), ALARMS) == "filter “tenant”"
    assert badge(Q.with_filter("t").with_sort("due", desc=True), ALARMS) == (
        "filter “t”  sort due in ▼")
