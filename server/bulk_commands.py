"""Bulk actions: preview what a selection matches, start a batch on it (or on keys),
cancel one; and the queries of one batch and of the list of them.

`bulk_start` is audited by the bulk service, which the handler hands the client's
address and role: a refusal at once, an accepted batch as one row when it ends
(besides one row per item). The preview and the cancel are audited by the ops
service. The queries are open to viewers.
"""

from __future__ import annotations

from typing import Any

from alarmtop.server.protocol import OPTIONAL_TEXT, Audit, Field, Request, Role, no_result
from alarmtop.server.services import Services, Spec, command, query

DEFAULT_BATCHES_PAGE = 50


async def bulk_preview(services: Services, request: Request) -> Any:
    return await services.rt.bulk.preview(request.args["selection"])


async def bulk_start(services: Services, request: Request) -> Any:
    args = request.args
    batch_id = await services.rt.bulk.start(
        args["action"], args.get("selection"), args.get("keys"), kind=args.get("kind"),
        max_in_flight=args.get("max_in_flight"), reason=args.get("reason"),
        note=args.get("note"), at_ms=args.get("at_ms"), actor=request.actor, role=request.role,
        token=args.get("token"))
    return await services.rt.bulk.get(batch_id)


async def bulk_cancel(services: Services, request: Request) -> Any:
    return await services.rt.bulk.cancel(request.args["batch_id"],
                                         reason=request.args.get("reason"),
                                         actor=request.actor, role=request.role)


async def bulk(services: Services, request: Request) -> Any:
    return await services.rt.bulk.get(request.args["batch_id"])


async def bulks(services: Services, request: Request) -> Any:
    limit = request.args.get("limit", DEFAULT_BATCHES_PAGE)
    rows = await services.rt.bulk.list(limit, request.args.get("after"))
    return {"rows": rows, "next": rows[-1]["id"] if len(rows) == limit else None}


SPECS = [
    # No `reason`: a preview changes nothing (it is an operator's, as the batch it
    # prepares is, and audited like any of their commands).
    Spec("bulk_preview", {"selection": Field(dict, True, "a query, see core.bulk")},
         Role.OPERATOR, Audit.SERVER, bulk_preview, "what a selection matches now, counted",
         no_result),
    command("bulk_start", {"action": Field(str), "selection": Field(dict, False),
                           "keys": Field(list, False), "kind": OPTIONAL_TEXT,
                           "max_in_flight": Field(int, False), "at_ms": Field(int, False),
                           "note": OPTIONAL_TEXT,
                           # The client's own id for this start: the same token again
                           # answers with the same batch (a retry after a lost answer).
                           "token": OPTIONAL_TEXT},
            bulk_start, "start a batch of one action on a selection or on keys",
            audit=Audit.RUNTIME),
    command("bulk_cancel", {"batch_id": Field(str)}, bulk_cancel, "stop a batch",
            audit_detail=no_result),
    query("bulk", {"batch_id": Field(str)}, bulk, "one batch and its progress"),
    query("bulks", {"limit": Field(int, False), "after": Field(str, False)}, bulks,
          "the batches, newest first"),
]
