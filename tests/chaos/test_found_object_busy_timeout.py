"""Found by the chaos harness's lock mode: the backend's busy timeout does not reach the
objects' databases.

`SqliteBackend(data_dir, busy_timeout_s=...)` documents the timeout as "how long a
write waits for a lock another connection holds (a backup, a `sqlite3` shell)
before it fails", but only runtime.sqlite's connection gets it: every object
database is opened by `aiosqlite.connect(path)` with sqlite3's default of 5 s. So
a write to an object whose file a backup holds waits 5 s whatever the operator
configured (the chaos workload's objects set their own timeout through their SQL
to make such locks bite; see `workload.set_busy_timeout`).
"""

from __future__ import annotations

from pathlib import Path

from alarmtop.core import DurableObject
from alarmtop.core.storage.sqlite.backend import SqliteBackend
from tests.conftest import RuntimeFactory


class Probe(DurableObject):
    async def busy_timeout_ms(self) -> int:
        """The busy timeout of this object's own database connection."""
        row = (await self.ctx.storage.sql.exec("PRAGMA busy_timeout")).one()
        return int(next(iter(row.values())))


async def test_the_backend_busy_timeout_reaches_object_databases(
        make_runtime: RuntimeFactory, data_dir: Path) -> None:
    rt = await make_runtime(Probe, backend=SqliteBackend(data_dir, busy_timeout_s=0.25))
    assert await rt.get(Probe, "p").busy_timeout_ms() == 250
