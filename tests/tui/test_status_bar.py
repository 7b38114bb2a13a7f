"""The header (`widgets/status_bar.py`) and the footer's fixed keys (`widgets/footer.py`):
lines that fit the terminal, the urgent counts first when it is narrow."""

from __future__ import annotations

from alarmtop.tui.state import ConsoleState
from alarmtop.tui.widgets.footer import fixed_keys_text
from alarmtop.tui.widgets.status_bar import status_text, totals

NOW = 1_800_000_000_000  # 08:00:00 UTC
COUNTS = {"alarms": {"dead": 2, "retrying": 14, "pending": 9_796, "running": 0},
          "near_exhaustion": 1, "objects": 11, "resident": 12, "needs_human": 1}


def state(connected: bool = True) -> ConsoleState:
    s = ConsoleState(connected=connected, counts=COUNTS,
                     faults=[{"id": "f1"}, {"id": "f2"}])
    if not connected:
        s.status = "disconnected, reconnecting"
    return s


def lines(width: int, connected: bool = True) -> list[str]:
    return status_text(state(connected), "demo@127.0.0.1:8765", "operator", width).plain.split(
        "\n")


def test_wide_the_first_line_says_where_and_who_and_the_second_the_urgent_counts() -> None:
    first, second = lines(160)
    assert first.startswith(" alarmtop ") and "demo@127.0.0.1:8765" in first
    assert "operator" in first and "alarms 9,812" in first
    assert second.startswith(" DEAD 2   NEAR-EXH 1   RETRYING 14   NEEDS-HUMAN 1")
    assert "faults 2" in second


def test_at_80_columns_no_line_wraps_and_the_urgent_counts_come_first() -> None:
    first, second = lines(80)
    assert len(first) <= 80 and len(second) <= 80
    assert "DEAD 2" in first and "NEAR-EXH 1" in first and "RETRYING 14" in first
    assert "NEEDS-HUMAN 1" in first and "operator" in first


def test_a_lost_connection_is_on_the_first_line_wide_and_the_second_narrow() -> None:
    assert " DISCONNECTED  reconnecting" in lines(160, connected=False)[0]
    first, second = lines(80, connected=False)
    assert "DEAD 2" in first and second.startswith(" DISCONNECTED")


def test_a_lost_connection_keeps_the_reason_as_said_and_dims_the_last_counts() -> None:
    """The reason was upper-cased whole ("CONNECTION REFUSED: [ERRNO 111]"), and the
    counts kept their colours as if current."""
    s = state(connected=False)
    s.status, s.now_ms = "disconnected, reconnecting: connection refused: [Errno 111]", NOW
    first = status_text(s, "demo", "operator", 160)
    assert (" DISCONNECTED  reconnecting: connection refused: [Errno 111]  counts as of "
            "08:00:00") in first.plain
    at = first.plain.index("DEAD 2")
    styles = [str(span.style) for span in first.spans if span.start <= at < span.end]
    assert styles == ["dim"], styles  # not red: the last count heard, not the server's now
    s.status = "refused: token not accepted"
    assert " REFUSED  token not accepted" in status_text(s, "demo", "operator", 160).plain


def test_objects_say_live_and_with_storage_not_stored() -> None:
    """12 live and 11 with storage is no contradiction: not every live object wrote."""
    assert totals(state()) == "objects 12 live, 11 with storage  alarms 9,812"


def test_executions_are_not_counted_as_objects_with_storage() -> None:
    """The server counts each execution among the objects with storage (it has its own
    database): "15 with storage" were 3 objects and 12 executions."""
    s = state()
    s.counts = {**COUNTS, "objects": 15, "executions": {"suspended": 10, "needs_human": 2}}
    assert totals(s) == "objects 12 live, 3 with storage  executions 12  alarms 9,812"


def test_the_fixed_keys_keep_help_and_quit_and_show_the_badge() -> None:
    assert fixed_keys_text("", False).plain == " ^p Commands  ? Help  q Quit "
    narrow = fixed_keys_text("filter “tenant”", True, compact=True).plain
    assert narrow.startswith(" filter “tenant”  esc  read-only ")
    assert narrow.endswith(" ^p ? Help q Quit")
