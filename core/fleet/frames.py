"""Messages of any size over a node link, in frames the transport carries.

A node link carries JSON messages: requests, answers, and frames the owner pushes
for relayed sockets. The transport refuses a frame over `MAX_FRAME` by closing the
whole connection, which would fail every other call in flight on it; so a message
longer than `PART_CHARS` is sent as parts instead, `{"$part": n, "data": slice}`
then `{"$part": n, "data": slice, "end": true}`, and put back together on the
other side. The parts of one message go out back to back (`LinkWriter` sends one
message at a time on a connection), so the order of messages is kept, and a
receiver holds at most one unfinished message per connection (a message whose
sender gave up halfway is dropped when the next one begins).

A message over `MAX_MESSAGE_CHARS` is not sent: the call (or answer) is refused
alone, with `MessageTooLarge` saying how big it was, and the link carries on.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from typing import Any

from alarmtop.core.model.errors import MessageTooLarge

MAX_FRAME = 4 * 1024 * 1024  # what the transport takes in one frame
# A part's data is JSON text (ASCII): escaped again inside its frame, it grows at most
# twofold, which stays under MAX_FRAME.
PART_CHARS = 1024 * 1024
MAX_MESSAGE_CHARS = 64 * 1024 * 1024
PART = "$part"
_encode = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode


def encode(message: dict[str, Any], what: str) -> str:
    """`message` as the JSON text to send; `MessageTooLarge` (naming `what`) when it is
    over `MAX_MESSAGE_CHARS`."""
    text = _encode(message)
    if len(text) > MAX_MESSAGE_CHARS:
        raise MessageTooLarge(
            f"{what} is {len(text) / 2**20:.1f} MiB as JSON; one node sends another at "
            f"most {MAX_MESSAGE_CHARS // 2**20} MiB in a call or an answer; nothing of it "
            "was sent")
    return text


def split(text: str, part_id: int) -> Iterator[str]:
    """The frames that carry `text`: itself when it fits in one, else its parts."""
    if len(text) <= PART_CHARS:
        yield text
        return
    for start in range(0, len(text), PART_CHARS):
        end = start + PART_CHARS >= len(text)
        frame: dict[str, Any] = {PART: part_id, "data": text[start:start + PART_CHARS]}
        if end:
            frame["end"] = True
        yield _encode(frame)


class LinkWriter:
    """Sends messages on one connection, one at a time: the parts of a big message go
    out back to back, and a message sent later never overtakes it."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._lock = asyncio.Lock()
        self._ids = itertools.count(1)

    async def send(self, text: str) -> None:
        """Send one message (JSON text from `encode`)."""
        async with self._lock:
            for frame in split(text, next(self._ids)):
                await self._conn.send(frame)


class PartsError(ValueError):
    """A frame that cannot be part of a message (or a message that grew too big)."""


class Receiver:
    """Puts messages back together from the frames of one connection."""

    def __init__(self) -> None:
        self._id: Any = None
        self._parts: list[str] = []
        self._size = 0

    def take(self, frame: str | bytes) -> Any:
        """The message a frame completes (decoded JSON), or `None` while its parts are
        still coming. `ValueError` for a frame that is not JSON; `PartsError` for a bad
        part or a message over `MAX_MESSAGE_CHARS` (its parts are dropped)."""
        data = json.loads(frame)
        if not (isinstance(data, dict) and PART in data):
            return data
        part, chunk = data.get(PART), data.get("data")
        if not isinstance(chunk, str):
            self._drop()
            raise PartsError("a part frame carries its data as text")
        if self._parts and part != self._id:
            # The sender gave up on the last one halfway (its call was cancelled): drop it.
            self._drop()
        self._id = part
        self._parts.append(chunk)
        self._size += len(chunk)
        if self._size > MAX_MESSAGE_CHARS:
            self._drop()
            raise PartsError(f"a message over {MAX_MESSAGE_CHARS // 2**20} MiB was dropped")
        if data.get("end") is not True:
            return None
        text = "".join(self._parts)
        self._drop()
        return json.loads(text)

    def _drop(self) -> None:
        self._id, self._parts, self._size = None, [], 0
