"""The console's one paging abstraction over the server (`tui/listings.py`), on a fake
client: what it asks, what it makes of the answer, a refusal kept."""

from __future__ import annotations

from typing import Any

from alarmtop.tui.client import CommandError, Disconnected
from alarmtop.tui.listings import ServerListings
from alarmtop.tui.paging import Answer, ListQuery


class Client:
    role = "viewer"

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def request(self, op: str, **args: Any) -> Any:
        self.asked.append((op, args))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


async def test_a_page_is_asked_with_the_query_and_read_back() -> None:
    client = Client({"rows": [{"object": "F/a"}], "total": 350, "note": "partial"})
    listings = ServerListings(client)  # type: ignore[arg-type]
    q = ListQuery("alarms", "tenant", "due", True, (("state", "pending"),))
    assert await listings.fetch(q, 100, 900) == Answer([{"object": "F/a"}], 350, "partial")
    assert client.asked == [("alarms", {"offset": 100, "limit": 500, "state": "pending",
                                        "filter": "tenant", "sort": "due", "desc": True})]


async def test_a_listing_without_a_total_counts_what_it_gave() -> None:
    listings = ServerListings(Client({"rows": [{"id": "f1"}]}))  # type: ignore[arg-type]
    answer = await listings.fetch(ListQuery("faults"), 0, 100)
    assert answer is not None and answer.total == 1


async def test_a_refusal_is_kept_until_the_next_answer_and_a_lost_connection_is_not() -> None:
    client = Client(CommandError("alarms: sorting by due goes through every one"))
    listings = ServerListings(client)  # type: ignore[arg-type]
    assert await listings.fetch(ListQuery("alarms"), 0, 100) is None
    assert listings.refused["alarms"].startswith("alarms: sorting by due")
    client.answer = {"rows": [], "total": 0}
    assert await listings.fetch(ListQuery("alarms"), 0, 100) == Answer([], 0)
    assert "alarms" not in listings.refused
    client.answer = Disconnected("gone")
    assert await listings.fetch(ListQuery("alarms"), 0, 100) is None
    assert listings.refused == {}
