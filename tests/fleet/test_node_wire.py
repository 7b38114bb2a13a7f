"""The node link's handshake and framing as pure functions: no socket, no loop."""

from __future__ import annotations

import json

import pytest

from alarmtop.core.errors import MessageTooLarge
from alarmtop.core.fleet import frames, handshake
from alarmtop.core.model.lobby import Lobby
from alarmtop.core.model.node_tls import NodeTls, check_node_host, is_loopback

SECRET = "s3cret-of-the-cluster"


def test_a_hello_proves_the_secret_for_one_challenge_only() -> None:
    challenge = handshake.new_nonce()
    hello = handshake.hello(SECRET, challenge, "a", 2)
    assert SECRET not in hello
    caller = handshake.check_hello(SECRET, challenge, hello)
    assert (caller.node, caller.protocol) == ("a", 2)
    with pytest.raises(handshake.HandshakeRefused, match="wrong cluster secret"):
        handshake.check_hello(SECRET, handshake.new_nonce(), hello)  # replayed elsewhere
    with pytest.raises(handshake.HandshakeRefused, match="wrong cluster secret"):
        handshake.check_hello("another secret", challenge, hello)
    forged = json.loads(hello)
    forged["node"] = "b"  # the proof covers who it says it is
    with pytest.raises(handshake.HandshakeRefused, match="wrong cluster secret"):
        handshake.check_hello(SECRET, challenge, json.dumps(forged))
    forged = json.loads(hello)
    forged["protocol"] = 1  # and the protocol it speaks
    with pytest.raises(handshake.HandshakeRefused, match="wrong cluster secret"):
        handshake.check_hello(SECRET, challenge, json.dumps(forged))
    with pytest.raises(handshake.HandshakeRefused, match="wrong cluster secret"):
        handshake.check_hello("", challenge, hello)  # no secret yet: nobody gets in


def test_the_welcome_proves_the_listener_knows_the_secret_too() -> None:
    challenge = handshake.new_nonce()
    hello = handshake.hello(SECRET, challenge, "a", None)
    caller = handshake.check_hello(SECRET, challenge, hello)
    assert caller.protocol is None
    welcome = handshake.welcome(SECRET, challenge, caller, "b")
    handshake.check_welcome(SECRET, challenge, hello, welcome)
    with pytest.raises(handshake.HandshakeRefused, match="does not know the cluster secret"):
        handshake.check_welcome(SECRET, challenge, hello,
                                handshake.welcome("guess", challenge, caller, "b"))
    # The caller's own proof sent back as a welcome proves nothing.
    reflected = json.dumps({"op": "welcome", "node": "b", "proof": json.loads(hello)["proof"]})
    with pytest.raises(handshake.HandshakeRefused):
        handshake.check_welcome(SECRET, challenge, hello, reflected)


@pytest.mark.parametrize("frame", [
    b"\x00binary", "not json", "[]", '{"op": "hello"}', '{"op": "hello", "secret": "\u00fc"}',
    json.dumps({"op": "hello", "node": "a", "nonce": "0" * 32, "proof": "\u00fc" * 64}),
    json.dumps({"op": "hello", "node": "a", "nonce": "\ud800" * 32, "proof": "0" * 64}),
    json.dumps({"op": "hello", "node": "a" * 201, "nonce": "0" * 32, "proof": "0" * 64}),
    json.dumps({"op": "hello", "node": "a", "nonce": "0" * 32, "proof": "0" * 64,
                "protocol": True}),
    "x" * (handshake.HELLO_MAX_BYTES + 1),
])
def test_anything_but_a_good_hello_is_refused_in_a_line(frame: str | bytes) -> None:
    with pytest.raises(handshake.HandshakeRefused) as info:
        handshake.check_hello(SECRET, handshake.new_nonce(), frame)
    assert "\n" not in str(info.value) and str(info.value)


@pytest.mark.parametrize("size", [0, 10, frames.PART_CHARS, frames.PART_CHARS + 1,
                                  3 * frames.PART_CHARS + 7])
def test_a_message_of_any_size_comes_back_whole(size: int) -> None:
    message = {"id": 1, "value": "\u00e9\"\\" * (size // 3)}
    text = frames.encode(message, "a test message")
    sent = list(frames.split(text, 7))
    assert all(len(f) <= frames.MAX_FRAME for f in sent)
    assert len(sent) == (1 if len(text) <= frames.PART_CHARS else -(-len(text) //
                                                                 frames.PART_CHARS))
    receiver = frames.Receiver()
    got = [receiver.take(f) for f in sent]
    assert got[:-1] == [None] * (len(sent) - 1) and got[-1] == message


def test_a_message_left_halfway_is_dropped_when_the_next_begins() -> None:
    first = list(frames.split(frames.encode({"v": "a" * (2 * frames.PART_CHARS)}, "m"), 1))
    second = list(frames.split(frames.encode({"v": "b" * (2 * frames.PART_CHARS)}, "m"), 2))
    receiver = frames.Receiver()
    assert receiver.take(first[0]) is None
    assert receiver.take('{"id": 3}') == {"id": 3}  # a small one in between goes through
    got = [receiver.take(f) for f in second]
    assert got[-1] == {"v": "b" * (2 * frames.PART_CHARS)}


def test_a_message_over_the_limit_is_refused_before_it_is_sent() -> None:
    with pytest.raises(MessageTooLarge, match=r"the answer is 64\.0 MiB.*at most 64 MiB"):
        frames.encode({"v": "x" * frames.MAX_MESSAGE_CHARS}, "the answer")
    receiver = frames.Receiver()
    part = json.dumps({frames.PART: 1, "data": "x" * frames.PART_CHARS})
    with pytest.raises(frames.PartsError, match="dropped"):
        for _ in range(frames.MAX_MESSAGE_CHARS // frames.PART_CHARS + 1):
            receiver.take(part)


def test_the_lobby_admits_a_newcomer_and_evicts_the_fullest_addresss_oldest() -> None:
    lobby: Lobby[str] = Lobby(2)
    assert lobby.admit("a1", "A") == [] and lobby.admit("a2", "A") == []
    assert lobby.admit("b1", "B") == ["a1"]
    assert "b1" in lobby and len(lobby) == 2


def test_node_links_off_this_machine_need_tls_or_a_say_so() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("node-a.internal")
    check_node_host("127.0.0.1", None, False)
    check_node_host("10.0.0.5", NodeTls.of("c.pem", "k.pem", None), False)
    check_node_host("10.0.0.5", None, True)
    with pytest.raises(ValueError, match="clear text"):
        check_node_host("10.0.0.5", None, False)
    assert NodeTls.of(None, None, None) is None
    with pytest.raises(ValueError, match="its own certificate"):
        NodeTls.of(None, None, "ca.pem")
