"""SVG snapshots of every view at 160x48 and at 80x24, drawn from the fixed data of
`tests/tui/fake.py`.

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

from tests.tui.fake import SCENES, SIZES, fake_console, frozen_console_clock

SnapCompare = Callable[..., bool]
CASES = [(scene, suffix) for scene in SCENES for suffix in SIZES]
SNAPSHOTS = Path(__file__).parent / "__snapshots__" / Path(__file__).stem
SCREENSHOTS = Path(__file__).resolve().parents[2] / "screenshots"


@pytest.fixture(autouse=True)
def frozen() -> Iterator[None]:
    """The console's countdown stands still."""
    with frozen_console_clock():
        yield


def case_id(scene_and_suffix: object) -> str:
    scene, suffix = scene_and_suffix  # type: ignore[misc]
    return f"{scene.name}{suffix or '-160x48'}"


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_view(snap_compare: SnapCompare, case: tuple[object, str]) -> None:
    """Each scene's `what` says what its picture shows; at 80x24 the urgent counts and
    ? and q are on screen in every one."""
    scene, suffix = case
    assert snap_compare(fake_console(fleet=scene.fleet),  # type: ignore[attr-defined]
                        terminal_size=SIZES[suffix],
                        run_before=scene.run_before)  # type: ignore[attr-defined]


def snapshot_file(scene_name: str, suffix: str) -> Path:
    return SNAPSHOTS / f"test_view[{scene_name}{suffix or '-160x48'}].svg"


def test_screenshots_are_the_approved_snapshots() -> None:
    """screenshots/ (shown in the README) holds exactly the approved snapshots; after
    `--snapshot-update`, run `python -m tests.tui.make_screenshots`."""
    stale = [f"{scene.name}{suffix}" for scene, suffix in CASES
             if not (SCREENSHOTS / f"{scene.name}{suffix}.svg").exists()
             or not snapshot_file(scene.name, suffix).exists()
             or normalize_svg((SCREENSHOTS / f"{scene.name}{suffix}.svg").read_text(
                 encoding="utf-8"))
             != normalize_svg(snapshot_file(scene.name, suffix).read_text(encoding="utf-8"))]
    assert stale == [], "run: python -m tests.tui.make_screenshots"
