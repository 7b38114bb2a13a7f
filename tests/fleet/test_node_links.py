"""Node links under attack and under load, on a real PostgreSQL and real sockets: the
cluster secret never crosses the wire and a captured hello works nowhere else; any
malformed hello is one clear refusal, never a traceback; silent sockets are capped;
one big call or answer is carried (or refused alone) without taking the link down;
an action another node asked for is audited where it ran, naming who asked; and
node links are served over TLS, or refused in clear text off this machine."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from alarmtop.core import DurableObject, PostgresBackend, Runtime, VirtualClock
from alarmtop.core.durable import DurableContext, durable_execution
from alarmtop.core.durable.errors import InvalidExecutionState
from alarmtop.core.errors import MessageTooLarge
from alarmtop.core.fleet import handshake
from alarmtop.core.fleet.admission import MAX_PENDING
from alarmtop.core.fleet.frames import MAX_MESSAGE_CHARS
from alarmtop.core.fleet.links import NodeClient
from alarmtop.core.model.errors import InvalidArgument, NoAlarm, NodeUnreachable
from alarmtop.core.model.operations import EXECUTION_CLASS
from tests.fleet.conftest import (
    SHARDS,
    WAIT_S,
    Counter,
    NodeFactory,
    backend_of,
    balance,
    name_on,
    prove,
    until,
)
from tests.server.lobby_fd_worker import tcp_sockets

MiB = 1024 * 1024


class Blob(DurableObject):
    """Big arguments and answers, and a call that stays in flight a while."""

    async def echo(self, text: str) -> int:
        return len(text)

    async def make(self, size: int) -> str:
        return "x" * size

    async def slow(self, ms: int) -> str:
        await asyncio.sleep(ms / 1000)  # wall time: it is a call in flight on the link
        return "done"


async def two(node: NodeFactory, *classes: type) -> tuple[Runtime, Runtime]:
    a = await node("a", *(classes or (Counter,)))
    b = await node("b", *(classes or (Counter,)))
    await balance(a, b)
    return a, b


async def closed_with(ws: ClientConnection) -> tuple[int | None, str | None]:
    with pytest.raises(ConnectionClosed) as info:
        async with asyncio.timeout(WAIT_S):
            while True:
                await ws.recv()
    rcvd = info.value.rcvd
    return (rcvd.code, rcvd.reason) if rcvd else (None, None)


class Tap:
    """A TCP relay that keeps every byte that crosses it, both ways."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.seen = bytearray()
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    self.seen += data
                    dst.write(data)
                    await dst.drain()
            dst.close()
        await asyncio.gather(pump(reader, up_w), pump(up_r, writer))

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1].split("/", 1)[0])


# -- the handshake -------------------------------------------------------------------------

async def test_the_secret_never_crosses_the_wire_and_a_captured_hello_works_once(
        node: NodeFactory) -> None:
    _a, b = await two(node)
    backend = backend_of(b)
    assert backend.address is not None
    secret = backend.cluster_secret
    tap = Tap(port_of(backend.address))
    await tap.start()
    name = name_on(b)
    peer = NodeClient(f"ws://127.0.0.1:{tap.port}/node", "a", secret)
    try:
        assert await peer.request("call", timeout_s=WAIT_S, cls="Counter", name=name,
                                  method="add", args=[1], kwargs={}) == 1
    finally:
        await peer.close()
        await tap.stop()
    assert b"challenge" in tap.seen and secret.encode() not in tap.seen
    # What a listener on the wire saw of a hello, sent again on a connection of its own.
    async with connect(backend.address) as conn:
        captured = await prove(conn, secret, "a")
        assert json.loads(await conn.recv())["op"] == "welcome"
    async with connect(backend.address) as conn:
        await conn.recv()  # a challenge of its own, which the captured hello does not answer
        await conn.send(captured)
        code, reason = await closed_with(conn)
    assert code == 1008 and reason == "wrong cluster secret"
    # The caller checks the listener too: one that does not know the secret learns no call.
    impostor = NodeClient(backend.address, "a", "not-the-secret")
    try:
        with pytest.raises(NodeUnreachable, match="refused this node: wrong cluster secret"):
            await impostor.request("events", timeout_s=WAIT_S, after=0)
    finally:
        await impostor.close()


def _hello(**fields: Any) -> str:
    return json.dumps({"op": "hello", "node": "x", "nonce": "0" * 32, "proof": "0" * 64,
                       **fields})


MALFORMED: list[tuple[str, str | bytes, int]] = [
    ("a non-ASCII secret, as older nodes sent it", json.dumps({"op": "hello", "secret": "ü",
                                                               "node": "x"}), 1008),
    ("a non-ASCII secret, unescaped", '{"op": "hello", "secret": "\u00fc\u00e9"}', 1008),
    ("a non-ASCII proof", _hello(proof="ü" * 64), 1008),
    ("a lone surrogate in the proof", _hello(proof="\ud800" * 64), 1008),
    ("a non-ASCII nonce", _hello(nonce="é" * 32), 1008),
    ("a proof that is a number", _hello(proof=12), 1008),
    ("a node id that is a list", _hello(node=["x"]), 1008),
    ("a node id with a control character", _hello(node="a\x00b"), 1008),
    ("a protocol that is text", _hello(protocol="2"), 1008),
    ("not JSON", "hello?", 1008),
    ("a JSON list", "[1, 2]", 1008),
    ("another op", json.dumps({"op": "call"}), 1008),
    ("a binary frame", b"\xff\xfe\x00", 1008),
    ("a frame over the handshake's size", "x" * (handshake.HELLO_MAX_BYTES + 10), 1009),
]


async def test_a_malformed_hello_is_one_clear_refusal_and_no_traceback(
        node: NodeFactory, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    _a, b = await two(node)
    backend = backend_of(b)
    assert backend.address is not None
    for what, frame, expected in MALFORMED:
        async with connect(backend.address) as conn:
            challenge = json.loads(await conn.recv())
            assert challenge["op"] == "challenge", what
            await conn.send(frame)
            code, reason = await closed_with(conn)
        assert code == expected and reason, (what, code, reason)
    tracebacks = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert tracebacks == [], [(r.name, r.getMessage()) for r in tracebacks]
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refusals and all("\n" not in line for line in refusals), refusals
    # The listener is none the worse: a node still gets in.
    name = name_on(b)
    peer = NodeClient(backend.address, "a", backend.cluster_secret)
    try:
        assert await peer.request("call", timeout_s=WAIT_S, cls="Counter", name=name,
                                  method="add", args=[5], kwargs={}) == 5
    finally:
        await peer.close()


# -- silent sockets --------------------------------------------------------------------------

async def test_silent_sockets_on_a_node_listener_are_capped_and_a_node_still_gets_in(
        node: NodeFactory) -> None:
    _a, b = await two(node)
    backend = backend_of(b)
    assert backend.address is not None
    port = port_of(backend.address)
    flood: list[asyncio.StreamWriter] = []
    try:
        for _ in range(300):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            flood.append(writer)

        async def accepted() -> bool:
            return tcp_sockets(port)[1] == 0
        await until(accepted, what="the flood accepted")
        for _ in range(20):
            await asyncio.sleep(0)  # evictions close their sockets on the next turns
        held, _ = tcp_sockets(port)
        assert held <= MAX_PENDING + 2, held  # + the links of node a, if any
        peer = NodeClient(backend.address, "c", backend.cluster_secret)
        try:
            assert await peer.request("call", timeout_s=WAIT_S, cls="Counter",
                                      name=name_on(b), method="add", args=[1],
                                      kwargs={}) == 1
        finally:
            await peer.close()
    finally:
        for writer in flood:
            writer.close()


def test_the_node_listener_counts_in_the_descriptor_budget(pg_dsn: str) -> None:
    """A start that cannot fit the budget names the node listener's sockets in it."""
    code = ("import resource\n"
            "from alarmtop.core import PostgresBackend, Runtime\n"
            "from alarmtop.core.errors import DescriptorBudget\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))\n"
            f"rt = Runtime(backend=PostgresBackend({pg_dsn!r}), max_resident=1)\n"
            "try:\n"
            "    rt.check_descriptors()\n"
            "except DescriptorBudget as exc:\n"
            "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert "node listener" in out.stdout, out


# -- big calls and answers -----------------------------------------------------------------

async def test_a_big_call_and_a_big_answer_do_not_take_the_link_down(
        node: NodeFactory) -> None:
    """5 MiB each way (over a frame's 4 MiB) crosses the link while another call is in
    flight on it; one over the limit is refused alone, with why, and nothing else fails."""
    a, b = await two(node, Blob)
    name = name_on(b, "Blob")
    other = name_on(b, "Blob", prefix="slow")
    stub = a.get("Blob", name)
    in_flight = asyncio.get_running_loop().create_task(a.get("Blob", other).slow(500))
    await asyncio.sleep(0.05)
    assert await stub.echo("y" * (5 * MiB)) == 5 * MiB
    assert len(await stub.make(6 * MiB)) == 6 * MiB
    with pytest.raises(MessageTooLarge, match=r"MiB as JSON.*nothing of it was sent"):
        await stub.echo("z" * (MAX_MESSAGE_CHARS + 1))
    with pytest.raises(InvalidArgument, match="ran on node b"):
        await stub.make(MAX_MESSAGE_CHARS + 1)
    assert await in_flight == "done"
    assert await stub.echo("small") == 5  # the same link, still up


# -- audit on the node that ran it -----------------------------------------------------------

async def test_an_action_another_node_asked_for_is_audited_where_it_ran(
        node: NodeFactory, clock: VirtualClock) -> None:
    a, b = await two(node)
    name = name_on(b)
    await a.get("Counter", name).arm(60_000)
    await a.rearm("Counter", name, at_ms=clock.now_ms() + 5_000)
    idle = name_on(b, prefix="idle")
    with pytest.raises(NoAlarm):
        await a.fire_now("Counter", idle)
    rows = [r for r in await b.audit.list(50) if r["role"] == "node"]
    by_target = {r["target"]: r for r in rows}
    done = by_target[f"Counter/{name}"]
    assert (done["actor"], done["action"], done["ok"], done["node"]) == \
        ("node a", "rearm", True, "b")
    assert done["detail"]["asked_by"] == "a" and done["detail"]["outcome"] == "ok"
    failed = by_target[f"Counter/{idle}"]
    assert (failed["actor"], failed["action"], failed["ok"]) == ("node a", "fire_now", False)
    assert "NoAlarm" in failed["detail"]["error"]
    # An action run where it was asked is the asker's own to audit (its ops server does).
    mine = name_on(a)
    await a.get("Counter", mine).arm(60_000)
    await a.rearm("Counter", mine)
    assert not [r for r in await a.audit.list(50) if r["target"] == f"Counter/{mine}"]


@durable_execution(name="waits")
async def waits(event: dict[str, str], ctx: DurableContext) -> str:
    cb = await ctx.create_callback("approve")
    return str(await cb.result())


async def test_an_execution_action_another_node_asked_for_is_audited_where_it_ran(
        node: NodeFactory, clock: VirtualClock) -> None:
    a, b = await two(node)
    for rt in (a, b):
        rt.register_execution(waits)
    eid = name_on(b, cls=EXECUTION_CLASS, prefix="run")
    await a.executions.start("waits", {}, execution_id=eid)
    await clock.advance(1)
    await a.executions.pause(eid, reason="look first", actor="ops-desk")
    with pytest.raises(InvalidExecutionState):
        await a.executions.retry_compensation(eid, actor="ops-desk")
    rows = [r for r in await b.audit.list(50) if r["role"] == "node" and r["target"] == eid]
    by_action = {r["action"]: r for r in rows}
    assert set(by_action) == {"pause", "retry_compensation"}, rows
    paused = by_action["pause"]
    assert (paused["actor"], paused["ok"], paused["node"]) == ("node a", True, "b")
    assert paused["detail"]["for"] == "ops-desk" and paused["detail"]["asked_by"] == "a"
    refused = by_action["retry_compensation"]
    assert not refused["ok"] and "InvalidExecutionState" in refused["detail"]["error"]
    # The node the operator used audits it as it always did.
    mine = [r for r in await a.audit.list(50) if r["role"] != "node" and r["target"] == eid]
    assert {r["action"] for r in mine} == {"pause", "retry_compensation"}


# -- TLS -------------------------------------------------------------------------------------

def make_cert(folder: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = folder / "node-cert.pem", folder / "node-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.fixture
async def tls_nodes(pg_dsn: str, clock: VirtualClock, tmp_path: Path
                    ) -> AsyncIterator[tuple[Runtime, Runtime, Path]]:
    cert, key = make_cert(tmp_path)
    started = []
    for node_id in ("a", "b"):
        rt = Runtime(tmp_path / node_id, clock=clock, backend=PostgresBackend(
            pg_dsn, node_id=node_id, shards=SHARDS, lease_s=30.0, node_tls_cert=cert,
            node_tls_key=key))
        rt.register(Counter)
        await rt.start()
        started.append(rt)
    await balance(*started)
    yield started[0], started[1], cert
    for rt in reversed(started):
        await rt.stop()


async def test_node_links_over_tls(tls_nodes: tuple[Runtime, Runtime, Path]) -> None:
    a, b, _cert = tls_nodes
    address = backend_of(b).address
    assert address is not None and address.startswith("wss://127.0.0.1:")
    name = name_on(b)
    assert await a.get("Counter", name).add(3) == 3  # a called b over wss://
    # In clear text, nothing gets in.
    with pytest.raises(Exception):  # noqa: B017 - the handshake fails, whatever it says
        async with connect(address.replace("wss://", "ws://")) as conn:
            await conn.recv()
    # A caller that does not trust the certificate is told why, and sent nothing.
    stranger = NodeClient(address, "c", backend_of(b).cluster_secret)
    try:
        with pytest.raises(NodeUnreachable, match=r"CERTIFICATE_VERIFY_FAILED|certificate"):
            await stranger.request("events", timeout_s=WAIT_S, after=0)
    finally:
        await stranger.close()


def test_node_links_in_clear_text_off_this_machine_are_refused(pg_dsn: str,
                                                               tmp_path: Path) -> None:
    for host in ("0.0.0.0", "10.1.2.3", "db.internal"):
        with pytest.raises(InvalidArgument, match=rf"node host {host} .* clear text"):
            PostgresBackend(pg_dsn, node_host=host)
    with pytest.raises(InvalidArgument, match=r"node host 10\.1\.2\.3 .* clear text"):
        Runtime(tmp_path, backend=PostgresBackend(pg_dsn), node_host="10.1.2.3")
    for host in ("127.0.0.1", "localhost", "::1"):
        PostgresBackend(pg_dsn, node_host=host)
    PostgresBackend(pg_dsn, node_host="0.0.0.0", node_insecure_no_tls=True)
    PostgresBackend(pg_dsn, node_host="0.0.0.0", node_tls_cert=tmp_path / "c.pem",
                    node_tls_key=tmp_path / "k.pem")
    with pytest.raises(InvalidArgument, match="TLS key needs its certificate"):
        PostgresBackend(pg_dsn, node_tls_key=tmp_path / "k.pem")


async def test_a_node_with_unusable_tls_files_does_not_start(pg_dsn: str, clock: VirtualClock,
                                                            tmp_path: Path) -> None:
    (tmp_path / "bad.pem").write_text("not a certificate\n")
    for cert, words in ((tmp_path / "missing.pem", "does not exist"),
                        (tmp_path / "bad.pem", "cannot load")):
        rt = Runtime(tmp_path / "data", clock=clock, backend=PostgresBackend(
            pg_dsn, node_id="z", shards=SHARDS, node_tls_cert=cert))
        with pytest.raises(InvalidArgument, match=f"node TLS: .*{words}"):
            await rt.start()
        assert not rt.running
