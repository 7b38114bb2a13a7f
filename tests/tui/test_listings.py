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


class Keyed:
    """A server that pages by key: each row of `every` carries its index as a cursor."""

    role = "viewer"

    def __init__(self, n: int, keyed: bool = True) -> None:
        self.every = [{"object": f"F/o{i:04d}"} for i in range(n)]
        self.keyed = keyed
        self.asked: list[dict[str, Any]] = []

    async def request(self, op: str, **args: Any) -> Any:
        self.asked.append(args)
        if "after" in args and not self.keyed:
            raise CommandError("alarms: unknown field(s) after")
        start = args["after"][0] + 1 if "after" in args else 0
        start += args.get("offset", 0)
        rows = self.every[start:start + args["limit"]]
        out: dict[str, Any] = {"rows": rows, "total": len(self.every)}
        if self.keyed:
            out["cursors"] = [[start + i] for i in range(len(rows))]
        return out


async def test_pages_after_the_first_start_from_the_cursor_of_the_row_before() -> None:
    server = Keyed(1000)
    listings = ServerListings(server)  # type: ignore[arg-type]
    q = ListQuery("alarms")
    first = await listings.fetch(q, 0, 300)
    assert first is not None and first.rows == server.every[:300] and not first.approximate
    page = await listings.fetch(q, 300, 100)
    assert server.asked[-1] == {"offset": 0, "limit": 100, "after": [299]}
    assert page is not None and page.rows == server.every[300:400] and page.total == 1000
    await listings.fetch(q, 405, 10)  # between bookmarks: a few rows skipped from one
    assert server.asked[-1] == {"offset": 5, "limit": 10, "after": [399]}
    other = await listings.fetch(q.with_filter("o09"), 300, 100)  # its own bookmarks
    assert other is not None and server.asked[-1] == {"offset": 300, "limit": 100,
                                                      "filter": "o09"}


async def test_a_position_from_a_bookmark_of_another_total_is_approximate() -> None:
    server = Keyed(1000)
    listings = ServerListings(server)  # type: ignore[arg-type]
    q = ListQuery("alarms")
    await listings.fetch(q, 0, 200)
    page = await listings.fetch(q, 100, 100)
    assert page is not None and not page.approximate
    server.every.insert(0, {"object": "F/new"})  # a row came before the bookmark
    page = await listings.fetch(q, 100, 100)
    assert page is not None and page.approximate and page.total == 1001


async def test_a_server_without_keys_is_paged_by_offset() -> None:
    server = Keyed(500, keyed=False)
    listings = ServerListings(server)  # type: ignore[arg-type]
    q = ListQuery("alarms")
    await listings.fetch(q, 0, 100)
    page = await listings.fetch(q, 100, 100)
    assert page is not None and page.rows == server.every[100:200]
    assert all("after" not in a for a in server.asked)
    keyed = Keyed(500)
    listings = ServerListings(keyed)  # type: ignore[arg-type]
    await listings.fetch(q, 0, 100)
    keyed.keyed = False  # the server stopped taking cursors (an older one restarted)
    page = await listings.fetch(q, 100, 100)
    assert page is not None and page.rows == keyed.every[100:200]
    assert "after" not in keyed.asked[-1] and "alarms" not in listings.refused
