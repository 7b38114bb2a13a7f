"""`runtime.bulk`: start, run, resume and cancel bulk actions.

The parts: `service` (`BulkService`, what `runtime.bulk` is), `runner` (a batch
worked through on this node), `items` (how each kind of item is done), `common`.

A batch is rows of the runtime database (`bulk_batches`, `bulk_items`), so it
outlives the client that started it and the runtime itself: `start` records every
key it will act on before it returns (a selection's matches are fixed when the
operator confirms), and a runtime that starts resumes every open batch. In a
fleet a batch is run by one node at a time (the batch's `node`); the nodes still
running look out for one that goes (a clean stop, or its leases left to run out)
and one of them takes over the batches it left. A runner reads its batch's row
before each group: a cancel made on another node, or a takeover by another node,
stops it there.

A runner works through the items in seq order, at most `throttle` at a time:

- Alarm items on this node whose record is not in an attempt (the common case:
  dead letters) are decided from their records, with no object woken, and written
  in one transaction per group: the alarm rows, each item's outcome and each
  item's audit row land together or not at all.
- Alarm items that need the object's turn (pause, resume, a running attempt) or
  live on another node go through the runtime's own action, one by one; their
  outcomes are written after. Each of these is safe to do again after a crash. One
  the runtime refuses because it is stopping did not run: it stays open, and the
  runner stops, as the stop would have stopped it.
- Execution items call `runtime.executions`, which audits each one; an item is
  marked `running` first with what it saw, so a restart can tell whether the
  action landed (`actions.already_applied`).

A run cut short by storage or the fleet (a shard moved under a group, an owner not
reached, PostgreSQL away) goes on from the items still open, as a resume would.

The batch itself is one more audit row, written with its end (action
`bulk_<action>`, target the batch id, the counts in the detail). Events:
`bulk.started`, `bulk.progress` (coalesced, see `progress`), `bulk.finished`.
"""

from alarmtop.core.model.bulk_actions import StartPlan
from alarmtop.core.ops.bulk.common import BatchNotFound, BulkParts, decide
from alarmtop.core.ops.bulk.service import BulkService

__all__ = ["BatchNotFound", "BulkParts", "BulkService", "StartPlan", "decide"]
