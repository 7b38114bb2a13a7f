"""`ConsoleTable.show`: refilled on every redraw, it touches only what changed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult

from alarmtop.tui.widgets.table import ConsoleTable

ROWS = [("a", ("PENDING", "in 1.0s")), ("b", ("RETRYING", "in 2.0s")),
        ("c", ("PENDING", "in 3.0s"))]


def shout(value: Any) -> Text:
    return Text(str(value), style="bold")


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        table = ConsoleTable(id="t", stylers={0: shout})
        table.add_column("state", width=10)
        table.add_column("due in", width=10)
        yield table


@contextmanager
def repaints(table: ConsoleTable) -> Iterator[list[str]]:
    """Record every call by which the table asks to be repainted or changes a cell."""
    seen: list[str] = []
    for name in ("refresh", "refresh_row", "update_cell"):
        original = getattr(table, name)

        def spy(*args: Any, _name: str = name, _original: Any = original, **kw: Any) -> Any:
            seen.append(_name)
            return _original(*args, **kw)

        setattr(table, name, spy)
    try:
        yield seen
    finally:
        for name in ("refresh", "refresh_row", "update_cell"):
            delattr(table, name)


async def test_the_same_rows_again_touch_nothing() -> None:
    async with TableApp().run_test() as pilot:
        table = pilot.app.query_one(ConsoleTable)
        table.show(ROWS)
        before = [table.get_row(key) for key, _ in ROWS]
        await pilot.pause()
        with repaints(table) as seen:
            table.show([(k, list(c)) for k, c in ROWS])  # lists compare as the tuples did
        assert seen == []
        after = [table.get_row(key) for key, _ in ROWS]
        assert all(a is b for old, new in zip(before, after, strict=True)
                   for a, b in zip(old, new, strict=True))


async def test_a_changed_cell_is_the_only_one_replaced_and_is_styled() -> None:
    async with TableApp().run_test() as pilot:
        table = pilot.app.query_one(ConsoleTable)
        table.show(ROWS)
        before = {key: table.get_row(key) for key, _ in ROWS}
        with repaints(table) as seen:
            table.show([ROWS[0], ("b", ("DEAD", "in 2.0s")), ROWS[2]])
        assert seen == ["refresh_row"]  # row b only, in place
        after = {key: table.get_row(key) for key, _ in ROWS}
        kept = [(key, i) for key in after for i in range(2) if after[key][i] is before[key][i]]
        assert kept == [("a", 0), ("a", 1), ("b", 1), ("c", 0), ("c", 1)]
        state = after["b"][0]
        assert isinstance(state, Text) and state.plain == "DEAD" and str(state.style) == "bold"


async def drawn(rows: list[tuple[str, tuple[str, str]]], cursor: int,
                then: list[tuple[str, tuple[str, str]]] | None = None
                ) -> list[list[tuple[str, str]]]:
    """Every line the table draws (text and style of each segment) once it has shown
    `rows` with the cursor on line `cursor`, and then, if given, `then`."""
    async with TableApp().run_test(size=(60, 8)) as pilot:
        table = pilot.app.query_one(ConsoleTable)
        table.show(rows)
        table.move_cursor(row=cursor)
        await pilot.pause()
        table.refresh()  # drawn again once settled (measuring new rows drops the renders)
        await pilot.pause()
        if then is not None:
            table.show(then)  # nothing else between the two: every cached render counts
            await pilot.pause()
        return [[(seg.text, str(seg.style)) for seg in table.render_line(y)]
                for y in range(len(then or rows) + 1)]


async def test_cells_changed_in_place_are_drawn_as_a_fresh_table_draws_them() -> None:
    """Updated in place (only their renders forgotten), the changed cells are drawn,
    under the cursor or not, and the rest as before: line for line what a table
    filled with the new rows at once draws."""
    changed = [ROWS[0], ("b", ("DEAD", "in 9.0s")), ("c", ("PENDING", "in 2.9s"))]
    for cursor in (0, 1):
        updated = await drawn(ROWS, cursor, then=changed)
        assert updated == await drawn(changed, cursor)
        assert "DEAD" in "".join(text for text, _ in updated[2])


async def test_other_rows_refill_the_table_and_the_cursor_follows_its_row() -> None:
    async with TableApp().run_test() as pilot:
        table = pilot.app.query_one(ConsoleTable)
        table.show(ROWS)
        table.move_cursor(row=1)
        table.show([ROWS[2], ROWS[0], ("d", ("PENDING", "in 4.0s"))])
        assert [str(k.value) for k in table.rows] == ["c", "a", "d"]
        assert table.cursor_row == 1 and table.selected == "a"  # b left: its line
        assert isinstance(table.get_row("d")[0], Text)
        table.show([("d", ("PENDING", "in 4.0s")), ROWS[0]])
        assert table.selected == "a" and table.cursor_row == 1
        table.show([ROWS[0]])
        assert [str(k.value) for k in table.rows] == ["a"] and table.cursor_row == 0


async def test_a_table_cleared_behind_its_back_is_refilled() -> None:
    async with TableApp().run_test() as pilot:
        table = pilot.app.query_one(ConsoleTable)
        table.show(ROWS)
        table.clear()
        table.show(ROWS)
        assert [str(k.value) for k in table.rows] == ["a", "b", "c"]


class Recording(TableApp):
    def __init__(self) -> None:
        super().__init__()
        self.left: list[tuple[str, str | None]] = []

        self.filtered: list[bool] = []

    def on_console_table_selection_left(self, event: ConsoleTable.SelectionLeft) -> None:
        self.left.append((event.left, event.now))
        self.filtered.append(event.filtered)


async def test_the_cursor_follows_its_row_as_rows_re_sort() -> None:
    """Identity, not position: the cursor is on b; b moves from line 1 to line 2 and
    the cursor goes with it, without a word; nothing left."""
    app = Recording()
    async with app.run_test() as pilot:
        table = pilot.app.query_one(ConsoleTable)
        table.show(ROWS)
        table.focus()
        await pilot.press("down")  # the operator's choice
        assert table.pinned and table.selected == "b"
        table.show([ROWS[0], ROWS[2], ROWS[1]])
        assert table.selected == "b" and table.cursor_row == 2
        await pilot.pause()
        assert app.left == []


async def test_left_alone_the_cursor_follows_its_row_too() -> None:
    """Before any key the cursor is on the first row; a more urgent row coming in above
    it does not take its place under the cursor (the detail pane would switch under the
    operator's eyes, and a key pressed then would act on the newcomer)."""
    async with Recording().run_test() as pilot:
        table = pilot.app.query_one(ConsoleTable)
        table.show(ROWS)
        assert table.selected == "a"
        table.show([("z", ("DEAD", "-")), *ROWS])
        assert table.cursor_row == 1 and table.selected == "a"


async def test_a_chosen_row_that_leaves_moves_the_cursor_to_its_line_and_says_so_once(
        ) -> None:
    """The chosen row goes: the cursor takes the row now on its line, the table says
    so once, and the cursor follows its new row from then on (quietly: nobody chose
    it)."""
    app = Recording()
    async with app.run_test() as pilot:
        table = pilot.app.query_one(ConsoleTable)
        table.show(ROWS)
        table.move_cursor(row=1)
        table.pin()
        table.show([ROWS[0], ROWS[2]])
        assert table.selected == "c" and not table.pinned
        table.show([ROWS[2], ROWS[0]])
        assert table.selected == "c"  # its row, not its line
        table.show([ROWS[0]])
        assert table.selected == "a"
        await pilot.pause()
        assert app.left == [("b", "c")]


async def test_a_row_missing_from_one_refresh_is_held_under_the_cursor() -> None:
    """With `now`, the cursor's row missing from the rows is kept in sight, on its line,
    for `hold_s`: when it comes back the cursor is still on it, nothing was said. Past
    `hold_s` it has left: said once, the cursor on the row now on its line."""
    app = Recording()
    async with app.run_test() as pilot:
        table = pilot.app.query_one(ConsoleTable)
        table.hold_s = 3.0
        table.show(ROWS, now=0.0)
        table.move_cursor(row=1)
        table.pin()
        table.show([ROWS[2], ROWS[0]], now=1.0)  # b fires and re-arms: missing once
        assert [str(k.value) for k in table.rows] == ["c", "b", "a"]
        assert table.selected == "b" and table.held == "b"
        table.show([ROWS[1], ROWS[2], ROWS[0]], now=1.5)  # back, first now
        assert table.selected == "b" and table.cursor_row == 0 and table.held is None
        table.show([ROWS[2], ROWS[0]], now=2.0)
        table.show([ROWS[2], ROWS[0]], now=4.9)
        assert table.selected == "b"
        table.show([ROWS[2], ROWS[0]], now=5.0)  # 3 s missing: gone
        assert table.selected == "c" and table.held is None
        await pilot.pause()
        assert app.left == [("b", "c")]
        # A row nobody chose is not held: the top one the cursor started on, say.
        table.show([ROWS[0]], now=6.0)
        assert table.selected == "a" and table.held is None


async def test_after_a_page_move_the_cursor_keeps_its_line_quietly() -> None:
    app = Recording()
    async with app.run_test() as pilot:
        table = pilot.app.query_one(ConsoleTable)
        table.show(ROWS, now=0.0)
        table.move_cursor(row=2)
        table.show([("x", ("PENDING", "-")), ("y", ("PENDING", "-")), ("z", ("PENDING", "-"))],
                   keep="line", now=0.1)
        assert table.selected == "z" and table.held is None
        await pilot.pause()
        assert app.left == []


async def test_after_a_new_filter_the_cursor_follows_its_row_or_goes_to_the_top() -> None:
    """A new filter or sort: the cursor's row if the answer has it; else the first row,
    said as filtered out, not as gone."""
    app = Recording()
    async with app.run_test() as pilot:
        table = pilot.app.query_one(ConsoleTable)
        table.show(ROWS, now=0.0)
        table.move_cursor(row=1)
        table.pin()
        table.show([ROWS[2], ROWS[1]], keep="query", now=0.1)
        assert table.selected == "b"
        table.show([ROWS[0], ROWS[2]], keep="query", now=0.2)
        assert table.selected == "a" and table.cursor_row == 0 and table.held is None
        await pilot.pause()
        assert app.left == [("b", "a")]
        assert app.filtered == [True]


async def test_columns_cut_long_text_with_an_ellipsis_and_rebuild_only_on_change() -> None:
    async with TableApp().run_test() as pilot:
        table = pilot.app.query_one(ConsoleTable)
        table.set_columns([("state", 10), ("due in", 6)])
        table.show([("a", ("PENDING", "in 59m54s"))])
        assert str(table.get_row("a")[1]) == "in 59…"
        table.move_cursor(row=0)
        before = list(table.columns)
        table.set_columns([("state", 10), ("due in", 6)])
        assert list(table.columns) == before  # the same columns: nothing rebuilt
        table.set_columns([("state ▲", 10), ("due in", 12)])
        assert str(table.get_row("a")[1]) == "in 59m54s"  # rows kept, cut to the new width
        assert [str(c.label) for c in table.columns.values()] == ["state ▲", "due in"]


async def test_home_and_end_go_to_the_first_and_last_row_not_sideways() -> None:
    async with TableApp().run_test(size=(60, 8)) as pilot:
        table = pilot.app.query_one(ConsoleTable)
        table.show([(str(i), ("PENDING", f"in {i}s")) for i in range(30)])
        table.focus()
        await pilot.press("end")
        assert table.cursor_row == 29 and table.scroll_x == 0
        await pilot.press("home")
        assert table.cursor_row == 0


async def test_text_that_looks_like_markup_is_drawn_as_it_is() -> None:
    """An error message is the user's text: "[/]" in it made the DataTable's markup
    parser raise while drawing, and "[bold]" turned into a style."""
    async with TableApp().run_test(size=(60, 6)) as pilot:
        table = pilot.app.query_one(ConsoleTable)
        table.set_columns([("state", 10), ("error", 40)])
        table.show([("a", ("DEAD", "KeyError: closing tag [/] here")),
                    ("b", ("DEAD", "see [bold]this[/bold]"))])
        await pilot.pause()
        lines = ["".join(seg.text for seg in table.render_line(y)) for y in range(3)]
        assert "closing tag [/] here" in lines[1] and "see [bold]this[/bold]" in lines[2]


async def test_a_click_chooses_the_row() -> None:
    async with TableApp().run_test(size=(60, 8)) as pilot:
        table = pilot.app.query_one(ConsoleTable)
        table.show(ROWS)
        await pilot.pause()
        assert not table.pinned
        await pilot.click(ConsoleTable, offset=(3, 3))  # the header, a, b, c: c
        assert table.pinned and table.selected == "c"
        table.show([ROWS[2], ROWS[0], ROWS[1]])
        assert table.selected == "c" and table.cursor_row == 0


async def test_columns_of_another_count_take_the_next_rows_and_keep_the_cursors_row() -> None:
    """A resize to a narrow layout with fewer columns: the rows drawn for the wide one
    do not fit it and are not put back; the next rows fill it and the cursor stays on
    the row the operator chose (the timers board crashed on this)."""
    async with TableApp().run_test() as pilot:
        table = pilot.app.query_one(ConsoleTable)
        wide = [(k, (*cells, "x")) for k, cells in ROWS]
        table.set_columns((("state", 10), ("due in", 10), ("more", 4)))
        table.show(wide)
        table.move_cursor(row=1)
        table.set_columns((("state", 10), ("due in", 10)))
        table.show(ROWS)
        await pilot.pause()
        assert table.row_count == 3 and len(table.columns) == 2
        assert table.selected == "b"
