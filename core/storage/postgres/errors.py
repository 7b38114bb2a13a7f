"""PostgreSQL's failures in alarmtop's terms: a `StorageError` that says what did not
happen and what to check, whatever asyncpg or the socket raised."""

from __future__ import annotations

from alarmtop.core.model.errors import StorageError


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` means the server could not be talked to at all (down, restarting,
    the connection cut), as opposed to a statement it refused."""
    if isinstance(exc, OSError | TimeoutError | ConnectionError):
        return True
    name = type(exc).__name__
    return name in {"ConnectionDoesNotExistError", "InterfaceError", "CannotConnectNowError",
                    "ConnectionFailureError", "AdminShutdownError", "CrashShutdownError",
                    "ConnectionRejectionError", "TooManyConnectionsError",
                    "InternalClientError"} or (
        type(exc).__module__.startswith("asyncpg") and "connection" in str(exc).lower()
        and "closed" in str(exc).lower())


def storage_error(exc: BaseException, where: str, doing: str = "the write") -> StorageError:
    if isinstance(exc, StorageError):
        return exc
    if unreachable(exc):
        return StorageError(f"PostgreSQL cannot be reached ({type(exc).__name__}: {exc}); "
                            f"{doing} did not happen: check that the server runs and the "
                            "DSN; the node carries on by itself once it is back", where)
    return StorageError(f"{doing} failed in PostgreSQL: {type(exc).__name__}: {exc}", where)
