"""The server's listings behind the console's one paging abstraction (`paging.Fetch`).

Views page through `(ListQuery, offset, limit)`; this turns that into the ops
query of the listing and its answer into rows and a total. When the server pages
by key instead of offset, this is the one place that changes.
"""

from __future__ import annotations

from alarmtop.tui.client import CommandError, Disconnected, OpsClient
from alarmtop.tui.paging import Answer, ListQuery

MAX_LIMIT = 500  # the server's largest page (server/wire.py MAX_PAGE)


class ServerListings:
    """Fetches pages of listings; remembers the server's last refusal of each."""

    def __init__(self, client: OpsClient) -> None:
        self.client = client
        self.refused: dict[str, str] = {}

    async def fetch(self, query: ListQuery, offset: int, limit: int) -> Answer | None:
        """A page, or None: refused (`refused[query.listing]` says why) or not
        connected (the header says so)."""
        try:
            data = await self.client.request(query.listing, offset=offset,
                                             limit=min(limit, MAX_LIMIT), **query.args())
        except CommandError as exc:
            self.refused[query.listing] = str(exc)
            return None
        except (Disconnected, TimeoutError):
            return None
        self.refused.pop(query.listing, None)
        rows = list(data.get("rows") or [])
        return Answer(rows, int(data.get("total", offset + len(rows))), data.get("note"))
