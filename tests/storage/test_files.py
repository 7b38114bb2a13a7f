"""Files and folders of a data dir: durable once created, private to their owner."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from alarmtop.core import DurableObject
from alarmtop.core.storage.sqlite import files, objects
from tests.conftest import RuntimeFactory

pytestmark = pytest.mark.sqlite_only  # the files of the SQLite backend


class Box(DurableObject):
    async def put(self, value: int) -> None:
        await self.ctx.storage.put("v", value)


async def test_every_new_folder_and_file_is_made_durable_in_its_parent(
        make_runtime: RuntimeFactory, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Observation 10: new folders under the data dir were not fsync'd in their parent,
    so a power loss could drop a new object's file with the folder it was in."""
    synced: list[Path] = []
    real = files.fsync_dir

    def record(path: Path) -> None:
        synced.append(Path(path))
        real(path)

    monkeypatch.setattr(files, "fsync_dir", record)
    monkeypatch.setattr(objects, "fsync_dir", record)
    rt = await make_runtime(Box)
    await rt.get(Box, "b").put(1)
    made = [data_dir, data_dir / "objects", data_dir / "objects" / "Box"]
    for folder in made:
        assert folder.parent in synced, f"{folder} was created but its parent never fsync'd"
    assert data_dir / "objects" / "Box" in synced  # the file renamed into place


def modes(paths: list[Path]) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in paths if p.exists()}


async def test_the_data_dir_and_its_databases_are_private(make_runtime: RuntimeFactory,
                                                          data_dir: Path) -> None:
    """The audit log, execution inputs and results are for the owner only."""
    rt = await make_runtime(Box)
    await rt.get(Box, "b").put(1)
    box = rt.backend.object_path("Box", "b")  # type: ignore[attr-defined]
    dbs = [data_dir / "runtime.sqlite", box]
    found = modes([data_dir, *dbs, *(Path(f"{p}-wal") for p in dbs)])
    assert found.pop(data_dir.name) == 0o700
    assert set(found.values()) == {0o600}, found
