"""Save the console's screenshots (the scenes of the snapshot tests, at 160x48 and at
80x24) as SVG files.

    python -m tests.tui.make_screenshots            # into ./screenshots/
    python -m tests.tui.make_screenshots OUT_DIR

Each view is drawn from the fixed data of `tests/tui/fake.py` with the console's
countdown frozen, exactly as `test_snapshots.py` draws it, so the files change
only when the console's drawing does.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.tui.fake import SCENES, SIZES, Scene, fake_console, frozen_console_clock

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "screenshots"


async def save(scene: Scene, suffix: str, out_dir: Path) -> Path:
    """Run the console on the fake backend, reach the scene, save its SVG."""
    app = fake_console(fleet=scene.fleet)
    async with app.run_test(size=SIZES[suffix]) as pilot:
        await scene.run_before(pilot)
        # The same settling as pytest-textual-snapshot before it takes its picture.
        await pilot.pause()
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()
        # save_screenshot() without simplification draws the same picture in more bytes;
        # simplify as pytest-textual-snapshot does, so the files equal the snapshots.
        path = out_dir / f"{scene.name}{suffix}.svg"
        path.write_text(app.export_screenshot(simplify=True), encoding="utf-8")
        # Leave with nothing in flight (the fake sends nothing after its fixed frames).
        app.workers.cancel_group(app, "feed")
    return path


async def save_all(out_dir: Path) -> list[Path]:
    """Every scene into `out_dir` (which must exist)."""
    with frozen_console_clock():
        return [await save(scene, suffix, out_dir) for scene in SCENES for suffix in SIZES]


def main(argv: list[str]) -> int:
    target = Path(argv[0]) if argv else DEFAULT_DIR
    target.mkdir(parents=True, exist_ok=True)
    for path in asyncio.run(save_all(target)):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
