"""Rows an operator marked (space) for a bulk action: by identity, not by line. Pure.

A mark is the row's key (an object's "Class/name", an execution's id) with the
kind of thing it is ("alarms" or "executions", the two kinds a bulk action
takes). Rows move, re-sort and page away while marks are held: a mark stays on
its object wherever its row is, even off the page shown, until it is cleared.
"""

from __future__ import annotations

from collections.abc import Iterator

KINDS = ("alarms", "executions")
NOUN = {"alarms": ("alarm", "alarms"), "executions": ("execution", "executions")}
MARK = "● "  # before a marked row's first cell
MAX_MARKS = 10_000  # more than that is what a selection by query is for


class TooManyMarks(ValueError):
    pass


class Marks:
    """Marked rows by (kind, key), in the order they were marked."""

    def __init__(self) -> None:
        self._marked: dict[tuple[str, str], None] = {}

    def toggle(self, kind: str, key: str) -> bool:
        """Mark the row, or unmark it if it was marked; True when it is marked now."""
        if kind not in KINDS:
            raise ValueError(f"rows of kind {kind!r} take no bulk action; kinds: {KINDS}")
        if (kind, key) in self._marked:
            del self._marked[kind, key]
            return False
        if len(self._marked) >= MAX_MARKS:
            raise TooManyMarks(f"{MAX_MARKS:,} rows are marked already: select by query "
                               "(m) to act on more")
        self._marked[kind, key] = None
        return True

    def clear(self) -> int:
        """Unmark everything; how many were marked."""
        n = len(self._marked)
        self._marked.clear()
        return n

    def discard(self, kind: str, keys: list[str]) -> None:
        for key in keys:
            self._marked.pop((kind, key), None)

    def __contains__(self, item: object) -> bool:
        return item in self._marked

    def __len__(self) -> int:
        return len(self._marked)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._marked)

    def keys(self, kind: str) -> list[str]:
        """The marked keys of one kind, in marking order."""
        return [k for kd, k in self._marked if kd == kind]

    def kinds(self) -> list[str]:
        """The kinds that have marks, in `KINDS` order."""
        present = {kd for kd, _ in self._marked}
        return [k for k in KINDS if k in present]

    def summary(self) -> str:
        """What the title and the footer say: "3 marked", "2 alarms + 1 execution marked"."""
        if not self._marked:
            return ""
        kinds = self.kinds()
        if len(kinds) == 1:
            return f"{len(self):,} marked"
        return " + ".join(counted(len(self.keys(k)), k) for k in kinds) + " marked"


def counted(n: int, kind: str) -> str:
    """"1 alarm", "3 executions"."""
    one, many = NOUN.get(kind, (kind, kind))
    return f"{n:,} {one if n == 1 else many}"
