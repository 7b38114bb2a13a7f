"""Who may open a socket and how fast it may talk: pure decisions, no sockets.

The socket handlers in `app` and `objects` ask these and apply the answer: a
`Refusal` is a close code and a reason the client reads (cut to a close frame
by `wire.close_reason`). Time comes in as an argument or an injected function,
so every decision is tested without a clock or a server.
"""

from __future__ import annotations

import collections
import hmac
import ipaddress
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

CLOSE_POLICY = 1008  # RFC 6455: the message (or connection) breaks a policy
CLOSE_INTERNAL = 1011  # the server cannot serve it: a misconfiguration here, not the client
CLOSE_TRY_AGAIN = 1013  # over a cap: the client may come back later


@dataclass(frozen=True)
class Refusal:
    """Why a connection is refused: the close code and the reason the client reads."""

    code: int
    reason: str


class RateLimit:
    """A token bucket: `per_s` a second, up to `burst` at once.

    On the wall clock by default (pacing clients is not runtime work); `now` is
    injected in tests. `rejected` counts refusals in a row, for a caller that
    closes a client that keeps pushing.
    """

    def __init__(self, per_s: float, burst: float,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.per_s, self.burst = per_s, burst
        self._now = now
        self.tokens, self.at = burst, now()
        self.rejected = 0

    def allow(self) -> bool:
        now = self._now()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.per_s)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            self.rejected = 0
            return True
        self.rejected += 1
        return False


def normalise_origin(origin: str) -> str:
    """`https://Example.com/` -> `https://example.com`: how origins are compared."""
    return origin.strip().rstrip("/").lower()


def check_origin(origin: str | None, allowed: Iterable[str]) -> Refusal | None:
    """Browsers send `Origin`; other clients (the console, scripts) send none and are
    let through. A browser page is let in only from an origin on the allow-list, so a
    page on another site cannot drive a socket with its visitor's network position."""
    if origin is None:
        return None
    if normalise_origin(origin) in {normalise_origin(o) for o in allowed}:
        return None
    shown = origin if len(origin) <= 60 else origin[:57] + "..."
    return Refusal(CLOSE_POLICY, f"origin {shown} is not allowed (server: --allow-origin)")


def same_token(given: str, expected: str) -> bool:
    """Constant-time comparison that no odd text (lone surrogates) can make raise."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"),
                               expected.encode("utf-8", "surrogatepass"))


def bearer_token(headers: Mapping[str, str], query: Mapping[str, list[str]]) -> str | None:
    """The token a client presents: `Authorization: Bearer T`, or `?token=T` (the one
    a browser can send, since its WebSocket API sets no headers)."""
    auth = headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    values = query.get("token")
    return values[0] if values else None


def expected_object_token(class_name: str, cls: Any, tokens: Mapping[str, str],
                          env: Mapping[str, str]) -> str | Refusal | None:
    """The token a class's sockets need: the server's own map first, then the class's
    `web_socket_token_env` (the name of an environment variable). None: no token.

    A class that names a variable that is not set is closed to everyone (fail closed),
    saying so: a forgotten variable must not open the route."""
    if class_name in tokens:
        return tokens[class_name]
    var = getattr(cls, "web_socket_token_env", None)
    if not var:
        return None
    value = env.get(str(var))
    if not value:
        return Refusal(CLOSE_INTERNAL, f"{class_name} needs a token and the server has none "
                                       f"(set {var})")
    return value


def check_object_token(class_name: str, presented: str | None,
                       expected: str | None) -> Refusal | None:
    if expected is None:
        return None
    if presented is None:
        return Refusal(CLOSE_POLICY, f"{class_name} sockets need a token (Authorization: "
                                     "Bearer ..., or ?token=...)")
    if not same_token(presented, expected):
        return Refusal(CLOSE_POLICY, f"wrong token for {class_name}")
    return None


class ConnectionCaps:
    """Open connections, in total and per client address, against their caps."""

    def __init__(self, max_total: int, max_per_address: int) -> None:
        self.max_total, self.max_per_address = max_total, max_per_address
        self.total = 0
        self.by_address: collections.Counter[str] = collections.Counter()

    def admit(self, address: str) -> Refusal | None:
        """Count the connection in, or say which cap it would pass."""
        if self.total >= self.max_total:
            return Refusal(CLOSE_TRY_AGAIN, f"server full: {self.max_total} object sockets "
                                            "open; try again later")
        if self.by_address[address] >= self.max_per_address:
            return Refusal(CLOSE_TRY_AGAIN, f"too many sockets from {address} (at most "
                                            f"{self.max_per_address}); close some first")
        self.total += 1
        self.by_address[address] += 1
        return None

    def release(self, address: str) -> None:
        self.total -= 1
        self.by_address[address] -= 1
        if self.by_address[address] <= 0:
            del self.by_address[address]


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server on this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere


def check_bind(host: str, tls: bool, insecure_no_tls: bool, flag: str = "--host") -> None:
    """Refuse to serve tokens in clear text beyond this machine unless told to."""
    if tls or insecure_no_tls or is_loopback(host):
        return
    raise ValueError(f"{flag} {host} is reachable from other machines and tokens would "
                     "cross the network in clear text: give --tls-cert/--tls-key, or "
                     "--insecure-no-tls if something else encrypts the traffic")
