"""Object names: which are valid, and the file name of each (one per name, never
shared, never outside its folder)."""

from __future__ import annotations

import hashlib
import re
from typing import Any
from urllib.parse import quote, unquote

from alarmtop.core.model.errors import InvalidObjectName

_LONG = 180  # encoded names longer than this end in a digest (file names stop at 255 bytes)
DIGEST_NAME = re.compile(r"^(.{100})~([0-9a-f]{64})$")


def object_file_name(object_name: str) -> str:
    """A file name that keeps every object name apart (and never escapes the folder).

    Every character but letters, digits and ``-_`` is escaped, so a raw ``~`` only
    ever comes from the digest form: names whose encoding would pass the 255-byte
    limit of file names keep a readable prefix and end in ``~`` and a digest of the
    whole name. The real name is kept inside the database (and in the runtime's
    `objects` table) for listings."""
    encoded = quote(object_name, safe="").replace(".", "%2E").replace("~", "%7E")
    if len(encoded) > _LONG:
        digest = hashlib.sha256(object_name.encode()).hexdigest()
        encoded = f"{encoded[:100]}~{digest}"
    return encoded + ".sqlite"


def legacy_object_file_name(object_name: str) -> str:
    """The file name alarmtop 0.1 gave an object (``~`` unescaped: a plain name could
    take a digest name's place). Only the upgrade of old data dirs uses it."""
    encoded = quote(object_name, safe="").replace(".", "%2E")
    if len(encoded) > _LONG:
        digest = hashlib.sha256(object_name.encode()).hexdigest()
        encoded = f"{encoded[:100]}~{digest}"
    return encoded + ".sqlite"


def name_of_file(stem: str) -> str | None:
    """The object name a (new-style) file name stands for; None for a digest name."""
    if DIGEST_NAME.match(stem):
        return None
    return unquote(stem)




MAX_NAME_LENGTH = 256


def check_object_name(name: Any) -> str:
    """`name` if it can name an object; else `InvalidObjectName` saying why."""
    if not isinstance(name, str) or not name:
        raise InvalidObjectName(f"object names are non-empty strings, not {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidObjectName(f"object name is {len(name)} characters long; the limit is "
                                f"{MAX_NAME_LENGTH}")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidObjectName(f"object name {name!r} contains control characters")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in name):
        raise InvalidObjectName(f"object name {name!r} contains a lone surrogate (not valid "
                                "text); names are UTF-8 text")
    return name
