"""How two nodes prove to each other that they know the cluster secret, without
sending it: a challenge-response on every new node connection.

    listener -> caller   {"op": "challenge", "node": id, "nonce": N1}
    caller -> listener   {"op": "hello", "node": id, "protocol": p, "nonce": N2,
                          "proof": HMAC(secret, "hello", N1, N2, caller id, p)}
    listener -> caller   {"op": "welcome", "node": id,
                          "proof": HMAC(secret, "welcome", N1, N2, caller id, p)}

N1 is fresh for every connection, so a hello captured on the wire proves nothing on
another one; the secret itself never crosses the wire. The caller checks the
listener's proof before it sends any request: something that merely listens at a
node's address learns no call. The two proofs are told apart by their label, so
one side's proof can never be replayed as the other's.

Pure: what to send and whether what came is right. `HandshakeRefused` says, in a
line, why a frame is not a good hello or welcome (whatever it holds: any text,
any type, any size the transport let through).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any, NamedTuple

NONCE_BYTES = 16
_NONCE_CHARS = 2 * NONCE_BYTES
_PROOF_CHARS = 2 * hashlib.sha256().digest_size
MAX_NODE_ID = 200  # a node id, as a handshake carries it
HELLO_MAX_BYTES = 4096  # a handshake frame is small: a bigger one is refused unread


class HandshakeRefused(Exception):
    """A handshake frame that is not what it must be; the message says why, in a line."""


class Hello(NamedTuple):
    """A caller that proved it knows the secret."""

    node: str
    protocol: int | None  # None: the caller named none (it speaks protocol 1)
    nonce: str


def new_nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)


def _proof(secret: str, label: str, challenge: str, nonce: str, node: str,
           protocol: int | None) -> str:
    message = "\x00".join(("alarmtop-node-link-v1", label, challenge, nonce, node,
                           "" if protocol is None else str(protocol)))
    return hmac.new(secret.encode("utf-8", "surrogatepass"), message.encode("utf-8",
                    "surrogatepass"), hashlib.sha256).hexdigest()


def challenge(node: str, nonce: str) -> str:
    return json.dumps({"op": "challenge", "node": node, "nonce": nonce})


def read_challenge(frame: str | bytes) -> tuple[str, str]:
    """(the listener's node id, its nonce) from its first frame."""
    data = _frame(frame, "challenge")
    return _node(data), _nonce(data)


def hello(secret: str, challenge_nonce: str, node: str, protocol: int | None) -> str:
    """The caller's answer to a challenge."""
    nonce = new_nonce()
    frame: dict[str, Any] = {"op": "hello", "node": node, "nonce": nonce,
                             "proof": _proof(secret, "hello", challenge_nonce, nonce, node,
                                             protocol)}
    if protocol is not None:
        frame["protocol"] = protocol
    return json.dumps(frame)


def check_hello(secret: str, challenge_nonce: str, frame: str | bytes) -> Hello:
    """The caller, if its hello proves the secret for this challenge; else
    `HandshakeRefused`."""
    data = _frame(frame, "hello")
    if "secret" in data and "proof" not in data:
        raise HandshakeRefused("this node asks for a proof of the cluster secret, not the "
                               "secret itself (the caller runs an older alarmtop: upgrade it)")
    node, nonce = _node(data), _nonce(data)
    protocol = data.get("protocol")
    if protocol is not None and (not isinstance(protocol, int) or isinstance(protocol, bool)):
        raise HandshakeRefused(f"the hello's protocol is a whole number, not {protocol!r:.40}")
    if not secret or not _same(data.get("proof"), _proof(secret, "hello", challenge_nonce,
                                                         nonce, node, protocol)):
        raise HandshakeRefused("wrong cluster secret")
    return Hello(node, protocol, nonce)


def welcome(secret: str, challenge_nonce: str, caller: Hello, node: str) -> str:
    return json.dumps({"op": "welcome", "node": node,
                       "proof": _proof(secret, "welcome", challenge_nonce, caller.nonce,
                                       caller.node, caller.protocol)})


def check_welcome(secret: str, challenge_nonce: str, hello_frame: str,
                  frame: str | bytes) -> None:
    """`HandshakeRefused` unless the listener's welcome proves the secret."""
    data = _frame(frame, "welcome")
    sent = json.loads(hello_frame)
    expected = _proof(secret, "welcome", challenge_nonce, sent["nonce"], sent["node"],
                      sent.get("protocol"))
    if not _same(data.get("proof"), expected):
        raise HandshakeRefused("the node answering there does not know the cluster secret")


def _frame(frame: str | bytes, op: str) -> dict[str, Any]:
    if not isinstance(frame, str):
        raise HandshakeRefused(f"a {op} is one JSON text frame, not binary")
    if len(frame) > HELLO_MAX_BYTES:
        raise HandshakeRefused(f"a {op} frame is at most {HELLO_MAX_BYTES} bytes")
    try:
        data = json.loads(frame)
    except ValueError:
        raise HandshakeRefused(f"a {op} is one JSON object; this frame is not JSON") from None
    if not isinstance(data, dict) or data.get("op") != op:
        raise HandshakeRefused(f"a {op} frame {{\"op\": \"{op}\", ...}} was expected")
    return data


def _node(data: dict[str, Any]) -> str:
    node = data.get("node")
    if not (isinstance(node, str) and 0 < len(node) <= MAX_NODE_ID and node.isprintable()):
        raise HandshakeRefused(f"a node id is 1 to {MAX_NODE_ID} printable characters")
    return node


def _nonce(data: dict[str, Any]) -> str:
    nonce = data.get("nonce")
    if not (isinstance(nonce, str) and len(nonce) == _NONCE_CHARS and _is_hex(nonce)):
        raise HandshakeRefused(f"a nonce is {_NONCE_CHARS} hexadecimal digits")
    return nonce


def _same(sent: object, expected: str) -> bool:
    """Whether `sent` is `expected` (a hex digest), in constant time, whatever `sent` is."""
    if not (isinstance(sent, str) and len(sent) == _PROOF_CHARS and _is_hex(sent)):
        return False
    return hmac.compare_digest(sent.encode("ascii"), expected.encode("ascii"))


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)
