"""The Lambda API's HTTP/1.1 server (`server/http11.py`) on a real socket, with small
limits: keep-alive, and every bound (head, headers, body, time, connections)
answered and closed; a stop that waits for requests in flight, within its grace."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from alarmtop.server.http11 import (
    BadRequest,
    HttpLimits,
    HttpRequest,
    HttpResponse,
    HttpServer,
    parse_head,
)

LIMITS = HttpLimits(max_head_bytes=512, max_headers=8, max_body_bytes=64, head_timeout_s=1.0,
                    body_timeout_s=1.0, idle_timeout_s=1.0, max_connections=3)
WAIT_S = 5.0


def refusal(status: int, message: str) -> HttpResponse:
    return HttpResponse(status, f"refused: {message}".encode())


class Echo:
    """Answers with what it got; `hold` keeps a request in flight until set."""

    def __init__(self) -> None:
        self.hold = asyncio.Event()
        self.hold.set()
        self.seen: list[HttpRequest] = []
        self.arrived = asyncio.Event()  # set at each request

    async def __call__(self, req: HttpRequest) -> HttpResponse:
        self.seen.append(req)
        self.arrived.set()
        await self.hold.wait()
        return HttpResponse(200, f"{req.method} {req.target} {len(req.body)}".encode() + req.body,
                            [("X-Peer", req.peer)])


@pytest.fixture
async def served() -> AsyncIterator[tuple[HttpServer, Echo]]:
    echo = Echo()
    server = HttpServer(echo, refusal, "127.0.0.1", 0, limits=LIMITS)
    await server.start()
    yield server, echo
    echo.hold.set()
    await server.stop(0.5)


async def exchange(port: int, data: bytes, responses: int = 1
                   ) -> tuple[list[tuple[int, bytes, dict[str, str]]], bool]:
    """Send `data`, read `responses` answers; whether the server closed after them."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        out = []
        async with asyncio.timeout(WAIT_S):
            for _ in range(responses):
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.lower(): v.strip() for k, _, v in
                           (line.partition(":") for line in lines[1:] if line)}
                body = await reader.readexactly(int(headers["content-length"]))
                out.append((int(lines[0].split()[1]), body, headers))
            closed = await reader.read(1) == b""
        return out, closed
    finally:
        writer.close()


def request(method: str = "POST", target: str = "/x?a=1", body: bytes = b"hi",
            extra: str = "") -> bytes:
    return (f"{method} {target} HTTP/1.1\r\nHost: h\r\nContent-Length: {len(body)}\r\n"
            f"{extra}\r\n").encode() + body


async def test_keep_alive_serves_requests_in_order_then_closes_when_asked(
        served: tuple[HttpServer, Echo]) -> None:
    server, _ = served
    answers, closed = await exchange(
        server.port, request(body=b"one") + request("GET", "/y", b"") +
        request(body=b"two", extra="Connection: close\r\n"), responses=3)
    assert [(s, b) for s, b, _ in answers] == [
        (200, b"POST /x?a=1 3one"), (200, b"GET /y 0"), (200, b"POST /x?a=1 3two")]
    assert answers[2][2]["connection"] == "close" and closed
    assert answers[0][2]["x-peer"] == "127.0.0.1"


@pytest.mark.parametrize(("data", "status"), [
    (b"POST /x HTTP/1.1\r\nContent-Length: 65\r\n\r\n" + b"x" * 65, 413),
    (b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", 501),
    (b"POST /x HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi", 400),
    (b"POST /x HTTP/1.1\r\nContent-Length: -2\r\n\r\n", 400),
    (b"GET /x HTTP/1.0\r\n\r\n", 505),
    (b"GET  /x HTTP/1.1\r\n\r\n", 400),
    (b"GET http://h/x HTTP/1.1\r\n\r\n", 400),
    (b"GET /x HTTP/1.1\r\nBad Header: 1\r\n\r\n", 400),
    (b"GET /x HTTP/1.1\r\nA: 1\r\n folded\r\n\r\n", 400),
    (b"GET /x HTTP/1.1\r\n" + b"".join(b"H%d: v\r\n" % i for i in range(9)) + b"\r\n", 431),
    (b"GET /x HTTP/1.1\r\nBig: " + b"v" * 600 + b"\r\n\r\n", 431),
])
async def test_what_breaks_http_or_a_limit_is_refused_and_closed(
        served: tuple[HttpServer, Echo], data: bytes, status: int) -> None:
    server, echo = served
    answers, closed = await exchange(server.port, data)
    assert answers[0][0] == status and closed, answers
    assert echo.seen == []  # the handler never saw it


async def test_slow_clients_are_cut_off(served: tuple[HttpServer, Echo]) -> None:
    server, echo = served
    answers, closed = await exchange(server.port, b"GET /x HTTP/1.1\r\n")  # no end of head
    assert answers[0][0] == 408 and closed
    answers, closed = await exchange(server.port, request(body=b"abcdef")[:-3])  # short body
    assert answers[0][0] == 408 and closed
    # Idle between requests: closed without a word.
    answers, closed = await exchange(server.port, request())
    assert answers[0][0] == 200 and closed
    assert len(echo.seen) == 1


async def test_at_most_max_connections_and_a_bounded_stop(
        served: tuple[HttpServer, Echo]) -> None:
    server, echo = served
    echo.hold.clear()
    opened = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(3)]
    for _, writer in opened:
        writer.write(request())
    await asyncio.wait_for(until_seen(echo, 3), WAIT_S)
    extra_reader, extra_writer = await asyncio.open_connection("127.0.0.1", server.port)
    assert await asyncio.wait_for(extra_reader.read(1), WAIT_S) == b""  # over the cap
    extra_writer.close()
    stopping = asyncio.ensure_future(server.stop(WAIT_S))
    await asyncio.sleep(0)
    echo.hold.set()  # the requests in flight end within the grace: answered, then closed
    await asyncio.wait_for(stopping, WAIT_S)
    for reader, writer in opened:
        data = await asyncio.wait_for(reader.read(), WAIT_S)
        assert data.startswith(b"HTTP/1.1 200") and b"Connection: close" in data
        writer.close()
    assert server.abandoned == 0


async def until_seen(echo: Echo, n: int) -> None:
    while len(echo.seen) < n:
        echo.arrived.clear()
        await echo.arrived.wait()


def test_the_request_head_parser_takes_only_http_1_1() -> None:
    method, target, headers = parse_head(b"GET /a%20b?x=1 HTTP/1.1\r\nHost: h\r\nX-A:  v \r\n",
                                         LIMITS)
    assert (method, target, headers) == ("GET", "/a%20b?x=1", [("Host", "h"), ("X-A", "v")])
    with pytest.raises(BadRequest):
        parse_head(b"GET /\xff HTTP/1.1\r\n", LIMITS)
