"""What `alarmtop web` lets one login do: pure decisions, the clock passed in.

Each browser console is a process: a login may run `per_session` of them and the
server `total` (one viewer session started any number, at any size: 1500x1500
took 150 MB and 71% of a core). Terminal sizes are clamped to what a screen can
show. Wrong tokens are throttled per client address: `burst` at once, then one
every `1/per_s` seconds; while throttled, no token is checked at all.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

MAX_CONSOLES_PER_SESSION = 4
MAX_CONSOLES = 16
# A 4K screen at a small font is about 550x150 cells; a terminal smaller than the
# console's smallest layout is no use either.
MIN_WIDTH, MAX_WIDTH = 20, 500
MIN_HEIGHT, MAX_HEIGHT = 8, 200
LOGIN_BURST = 5
LOGIN_PER_S = 0.5


@dataclass(frozen=True)
class ConsoleCaps:
    """Consoles a login may run at once, and the server in all."""

    per_session: int = MAX_CONSOLES_PER_SESSION
    total: int = MAX_CONSOLES

    def refusal(self, session_open: int, total_open: int) -> str | None:
        """Why one more console may not start, or None."""
        if session_open >= self.per_session:
            return (f"this login has {session_open} consoles open (at most "
                    f"{self.per_session}): close one first")
        if total_open >= self.total:
            return f"server full: {total_open} consoles open (at most {self.total}); retry later"
        return None


def clamp_size(width: Any, height: Any) -> tuple[int, int]:
    """A terminal size as the browser sent it, made one a console may have."""
    return (_clamp(width, 80, MIN_WIDTH, MAX_WIDTH), _clamp(height, 24, MIN_HEIGHT, MAX_HEIGHT))


def _clamp(value: Any, default: int, low: int, high: int) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        number = default
    return max(low, min(high, number))


class LoginThrottle:
    """Wrong tokens per client address, as token buckets on `clock` (seconds)."""

    def __init__(self, clock: Callable[[], float], burst: float = LOGIN_BURST,
                 per_s: float = LOGIN_PER_S, max_addresses: int = 10_000) -> None:
        self._clock = clock
        self.burst, self.per_s = burst, per_s
        self.max_addresses = max_addresses
        self._buckets: dict[str, tuple[float, float]] = {}  # address -> (tokens, at)

    def wait_s(self, address: str) -> float:
        """0 if `address` may try a token now, else how many seconds until it may."""
        tokens = self._tokens(address)
        return 0.0 if tokens >= 1 else math.ceil((1 - tokens) / self.per_s)

    def failed(self, address: str) -> None:
        """`address` gave a wrong token."""
        tokens = self._tokens(address) - 1
        if len(self._buckets) >= self.max_addresses and address not in self._buckets:
            self._prune()
        self._buckets[address] = (tokens, self._clock())

    def _tokens(self, address: str) -> float:
        tokens, at = self._buckets.get(address, (self.burst, self._clock()))
        return min(self.burst, tokens + (self._clock() - at) * self.per_s)

    def _prune(self) -> None:
        """Forget the addresses whose bucket has filled again (they are as if new)."""
        for address in [a for a in self._buckets if self._tokens(a) >= self.burst]:
            del self._buckets[address]


def origin_of(url: str) -> str:
    """`https://Ops.example.com/` -> `https://ops.example.com`; ValueError if `url` is
    not an http(s) origin (a scheme and a host, nothing after them)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"a public origin is http(s)://HOST[:PORT], not {url!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ValueError(f"a public origin has no path, query or user: {url!r}")
    return f"{parts.scheme}://{parts.netloc.lower()}"


def websocket_origins(origins: Iterable[str]) -> list[str]:
    """The ws:// or wss:// form of each origin (for the page's connect-src)."""
    return [("wss" if o.startswith("https:") else "ws") + ":" + o.split(":", 1)[1]
            for o in origins]


__all__ = ["ConsoleCaps", "LoginThrottle", "clamp_size", "origin_of", "websocket_origins"]
