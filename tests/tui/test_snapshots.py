"""SVG snapshots of every view, drawn from the fixed data of `tests/tui/fake.py`.

The console runs on `FakeOpsClient` with its local countdown frozen, so no time
and no random value reaches the picture: a snapshot changes only when what the
console draws changes. Approve a deliberate change with
`pytest tests/tui/test_snapshots.py --snapshot-update`, then refresh the README's
copies with `python -m tests.tui.make_screenshots` (the same scenes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pytest_textual_snapshot import normalize_svg  # type: ignore[import-untyped]

from tests.tui.fake import SCENES, SIZE, Scene, fake_console, frozen_console_clock

# The known un-awaited reload() of a first visit (see test_console.py) must not fail these.

SnapCompare = Callable[..., bool]
BY_NAME = {scene.name: scene for scene in SCENES}


@pytest.fixture(autouse=True)
def frozen() -> Iterator[None]:
    """The console's countdown stands still."""
    with frozen_console_clock():
        yield


def snap(snap_compare: SnapCompare, name: str) -> bool:
    scene: Scene = BY_NAME[name]
    return snap_compare(fake_console(), terminal_size=SIZE, run_before=scene.run_before)


def test_overview(snap_compare: SnapCompare) -> None:
    """The overview: header counts and sparklines, alarms by urgency (dead, near
    exhaustion, retrying, then soonest due), the needs-human saga first."""
    assert snap(snap_compare, "overview")


def test_alarms_with_attempts(snap_compare: SnapCompare) -> None:
    """The alarms page with the selected dead letter's seven attempts in the side pane."""
    assert snap(snap_compare, "alarms")


def test_executions_with_needs_human_selected(snap_compare: SnapCompare) -> None:
    """The executions view with the needs-human festival selected: its saga stack, its
    callbacks (one waiting for a human) and its timeline."""
    assert snap(snap_compare, "executions")


def test_objects(snap_compare: SnapCompare) -> None:
    """Objects: resident or hibernated, sockets, alarm and its state."""
    assert snap(snap_compare, "objects")


def test_dead_letters(snap_compare: SnapCompare) -> None:
    """Dead letters only, with the attempts of the selected one."""
    assert snap(snap_compare, "dead-letters")


def test_faults(snap_compare: SnapCompare) -> None:
    """Active faults: an always-on compensation failure and a counted alarm fault."""
    assert snap(snap_compare, "faults")


def test_audit(snap_compare: SnapCompare) -> None:
    """The audit log: when, who, role, action, target, ok or refused, reason."""
    assert snap(snap_compare, "audit")


def test_events(snap_compare: SnapCompare) -> None:
    """The live event log, failures in red and retries in yellow."""
    assert snap(snap_compare, "events")


def test_help(snap_compare: SnapCompare) -> None:
    """The help over the overview: every key and what it does."""
    assert snap(snap_compare, "help")


SNAPSHOT_OF = {"overview": "test_overview", "alarms": "test_alarms_with_attempts",
               "executions": "test_executions_with_needs_human_selected",
               "objects": "test_objects", "dead-letters": "test_dead_letters",
               "faults": "test_faults", "audit": "test_audit", "events": "test_events",
               "help": "test_help"}
SNAPSHOTS = Path(__file__).parent / "__snapshots__" / Path(__file__).stem
SCREENSHOTS = Path(__file__).resolve().parents[2] / "screenshots"


def test_every_scene_has_a_snapshot_test() -> None:
    """The screenshots script and these tests draw the same list of scenes."""
    assert [scene.name for scene in SCENES] == list(SNAPSHOT_OF)
    assert all(callable(globals()[test]) for test in SNAPSHOT_OF.values())


def test_screenshots_are_the_approved_snapshots() -> None:
    """screenshots/ (shown in the README) holds exactly the approved snapshots; after
    `--snapshot-update`, run `python -m tests.tui.make_screenshots`."""
    stale = [name for name, test in SNAPSHOT_OF.items()
             if not (SCREENSHOTS / f"{name}.svg").exists()
             or normalize_svg((SCREENSHOTS / f"{name}.svg").read_text(encoding="utf-8"))
             != normalize_svg((SNAPSHOTS / f"{test}.svg").read_text(encoding="utf-8"))]
    assert stale == [], "run: python -m tests.tui.make_screenshots"
