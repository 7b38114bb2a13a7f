"""The one exception tree of alarmtop.

::

    AlarmtopError
     ├── InvalidArgument (also ValueError)       bad input from a caller
     │    ├── NotSerializable                    argument/result/value is not JSON
     │    ├── InvalidAlarmTime                   set_alarm() got something that is not a time
     │    ├── InvalidObjectName                  empty, too long or control characters
     │    ├── BadCronExpression                  cron() could not parse the expression
     │    └── InvalidFault                       unknown fault kind or missing parameter
     ├── NotFound (also LookupError)
     │    ├── UnknownClass                       class not registered with the runtime
     │    ├── UnknownMethod                      no such public RPC method
     │    ├── NoAlarm                            operator action on an object without alarm
     │    ├── UnknownFault
     │    └── UnknownSocket                      a relayed socket its owner no longer holds
     ├── RuntimeNotRunning                       used before start() or after stop()
     ├── ReentrantCall                           an object called itself through a stub
     ├── HandlerAborted                          a handler raised SystemExit, KeyboardInterrupt
     │                                           or another BaseException: its event failed
     ├── ObjectBusy                              an event held the object past a caller's wait
     ├── DescriptorBudget                        max_resident and sockets exceed ulimit -n
     ├── CommandTimeout                          an ops command had no outcome by its deadline
     ├── NodeUnreachable                         the node holding an object's shard is away
     │    ├── PeerDown                           not reached at all: nothing was sent
     │    └── ShardMoved                         that node no longer holds the shard
     ├── RemoteCallError                         a peer node raised what cannot be rebuilt
     ├── StorageError                            a database could not be opened or written
     │    ├── SqlError                           an object's SQL statement failed
     │    ├── CorruptDatabase                    a database file is damaged (quarantined, or
     │    │                                      start() refused to run over it)
     │    ├── ObjectQuarantined                  an object's database is in quarantine; the
     │    │                                      object refuses events until an operator acts
     │    ├── DiskFull                           no space left: the event failed, none of its
     │    │                                      writes were kept, earlier ones are intact
     │    ├── OutOfDescriptors                   no file descriptor left to open a database
     │    ├── ChainBroken                        an earlier checkpoint of the invocation failed
     │    ├── DataDirInUse                       another runtime holds the data folder's lock
     │    ├── CommitOutcomeUnknown               the connection went during an event's
     │    │                                      commit: it may or may not have landed
     │    └── LeaseLost                          this node lost the shard it was writing
     ├── AlarmHandlerTimeout (raised into the attempt record, never to callers)
     └── GiveUp                                  an alarm handler's failure that must not
                                                 be retried: a dead letter at once

Every error carries the fields it is about (object class and name, alarm, step)
and a message that says how to fix the problem.
"""

from __future__ import annotations


class AlarmtopError(Exception):
    """Base class of every error raised by alarmtop."""


class InvalidArgument(AlarmtopError, ValueError):
    """A caller passed something the runtime cannot accept; nothing was changed."""


class MessageTooLarge(InvalidArgument):
    """A call or an answer too big to go from one node to another; nothing of it was
    sent, and the link carries on."""


class NotSerializable(InvalidArgument):
    """A value that must cross an object boundary is not JSON-serialisable."""

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(
            f"{what} is not JSON-serialisable ({detail}); pass plain dicts, lists, "
            "strings, numbers, booleans or None"
        )
        self.what = what


class InvalidAlarmTime(InvalidArgument):
    """`set_alarm` got something other than epoch milliseconds or an aware datetime."""


class InvalidObjectName(InvalidArgument):
    """Object names are non-empty strings of at most 256 printable characters."""


class BadCronExpression(InvalidArgument):
    """A cron expression could not be parsed."""

    def __init__(self, expression: str, detail: str) -> None:
        super().__init__(
            f"bad cron expression {expression!r}: {detail}; use five fields "
            "'minute hour day month day_of_week', e.g. '*/5 * * * *'"
        )
        self.expression = expression


class InvalidFault(InvalidArgument):
    """A fault could not be injected as asked."""


class NotFound(AlarmtopError, LookupError):
    """The thing named does not exist."""


class UnknownClass(NotFound):
    def __init__(self, class_name: str, known: list[str]) -> None:
        hint = ", ".join(sorted(known)) or "none registered"
        super().__init__(
            f"unknown object class {class_name!r}; register it with runtime.register() "
            f"first (registered: {hint})"
        )
        self.class_name = class_name


class UnknownMethod(NotFound):
    def __init__(self, class_name: str, method: str) -> None:
        super().__init__(
            f"{class_name} has no public method {method!r} to call; RPC reaches only "
            "async methods whose names do not start with '_'"
        )
        self.class_name = class_name
        self.method = method


class NoAlarm(NotFound):
    def __init__(self, class_name: str, object_name: str, action: str) -> None:
        super().__init__(
            f"{class_name}/{object_name} has no alarm to {action}; the object sets one "
            "with ctx.storage.set_alarm()"
        )
        self.class_name = class_name
        self.object_name = object_name


class UnknownFault(NotFound):
    def __init__(self, fault_id: str) -> None:
        super().__init__(f"no active fault with id {fault_id!r}; see runtime.faults.list()")
        self.fault_id = fault_id


class UnknownSocket(NotFound):
    """A node relayed a frame for an object socket its owner does not hold (it closed,
    or the object moved): the relaying node closes its client's socket."""


class RuntimeNotRunning(AlarmtopError):
    """The runtime was used before `start()` or after `stop()`."""


class ReentrantCall(AlarmtopError):
    """An object called itself through a stub while handling an event (it would deadlock)."""

    def __init__(self, class_name: str, object_name: str) -> None:
        super().__init__(
            f"{class_name}/{object_name} called itself through a stub during an event; "
            "call the method directly on self instead"
        )
        self.class_name = class_name
        self.object_name = object_name


class HandlerAborted(AlarmtopError):
    """An object's method raised something that is not an `Exception` (`SystemExit`,
    `KeyboardInterrupt`, a `CancelledError` of its own): the runtime takes it as the
    event's failure, as it takes any raise, and tells the caller with this error (the
    original is its `__cause__`). The process goes on."""

    def __init__(self, class_name: str, object_name: str, method: str | None,
                 error: BaseException) -> None:
        what = f".{method}()" if method else ""
        super().__init__(f"{class_name}/{object_name}{what} raised {type(error).__name__}"
                         f"{': ' + str(error) if str(error) else ''}; the runtime took it as "
                         "the event's failure (its writes were kept, as for any raise)")
        self.class_name = class_name
        self.object_name = object_name
        self.type_name = type(error).__name__


class StorageError(AlarmtopError):
    """A database could not be opened, read or written."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message if path is None else f"{message} (file: {path})")
        self.path = path


class SqlError(StorageError):
    """An object's SQL statement failed (syntax, constraint, missing table...)."""


class CorruptDatabase(StorageError):
    """A database file is damaged: SQLite reports it malformed, it is not a database, or
    it is empty where data must be.

    `quarantined_to` is where the damaged file was moved (None when nothing was moved,
    e.g. when `start()` refuses to run over a damaged runtime database)."""

    def __init__(self, message: str, path: str | None = None,
                 quarantined_to: str | None = None) -> None:
        super().__init__(message, path)
        self.quarantined_to = quarantined_to


class ObjectQuarantined(StorageError):
    """The object's database was moved to quarantine; rather than start it empty, the
    object refuses events until an operator restores a good copy or drops the note."""

    def __init__(self, class_name: str, object_name: str, path: str, notes: list[str]) -> None:
        super().__init__(
            f"{class_name}/{object_name} refuses events: its database was quarantined "
            f"({', '.join(notes)}). Restore a good copy to {path} to bring the object back "
            f"with its data, or delete the quarantine note to let it start empty", path)
        self.class_name = class_name
        self.object_name = object_name
        self.notes = notes


class DiskFull(StorageError):
    """The disk (or the file system's quota) is full. The event that hit it failed and
    none of its writes were kept; everything committed before is intact. Free space and
    the next event succeeds."""


class AlarmHandlerTimeout(AlarmtopError):
    """An alarm handler ran past `alarm_timeout` and was cancelled."""

    def __init__(self, class_name: str, object_name: str, timeout_s: float) -> None:
        super().__init__(
            f"alarm handler of {class_name}/{object_name} ran longer than "
            f"alarm_timeout={timeout_s:g}s and was cancelled"
        )
        self.class_name = class_name
        self.object_name = object_name


class GiveUp(AlarmtopError):
    """Raised by an alarm handler whose failure no retry can mend: the attempt fails and
    the alarm is a dead letter at once (with this message), for an operator to re-arm.
    The runtime's own objects use it (an execution whose invocations keep failing)."""


class ObjectBusy(AlarmtopError):
    """An event held the object's turn for longer than the caller could wait; the
    caller's action was not done (it never got the turn)."""

    def __init__(self, class_name: str, object_name: str, doing: str,
                 age_s: float | None, waited_s: float) -> None:
        since = "" if age_s is None else f" (started {age_s:.0f} s ago)"
        super().__init__(f"{class_name}/{object_name} is busy {doing}{since}; nothing was "
                         f"done after waiting {waited_s:g} s for it")
        self.class_name = class_name
        self.object_name = object_name
        self.doing = doing
        self.age_s = age_s
        self.waited_s = waited_s


class DescriptorBudget(AlarmtopError):
    """The runtime (and its server) would need more file descriptors than the process
    may open; nothing was started. The message says what to change."""

    def __init__(self, message: str, need: int, limit: int) -> None:
        super().__init__(message)
        self.need = need
        self.limit = limit


class OutOfDescriptors(StorageError):
    """An object's database could not be opened: the process has no file descriptor
    left (EMFILE). The event failed and none of its writes were kept."""


class CommandTimeout(AlarmtopError):
    """A command had no outcome by its deadline; it was left to finish."""


class CommitOutcomeUnknown(StorageError):
    """The connection went while an event's commit was under way: it may have landed or
    not, and nothing can tell which from here. The event counts as failed; what it
    wrote ahead of the commit (an early alarm row) stays, to be reconciled when due."""


class LeaseLost(StorageError):
    """This node no longer holds the lease of a shard it was writing: nothing of the
    write was kept (another node owns those objects now)."""


class RemoteCallError(AlarmtopError):
    """The owner of an object raised something the caller's node cannot rebuild."""

    def __init__(self, type_name: str, message: str, node: str) -> None:
        super().__init__(f"{type_name}: {message} (on node {node})")
        self.type_name = type_name
        self.remote_message = message
        self.node = node


class NodeUnreachable(AlarmtopError):
    """The node that holds an object's shard did not answer."""


class PeerDown(NodeUnreachable):
    """A node could not be reached at all: nothing was sent to it, so the call may be
    made again (to it, or to the shard's next owner)."""


class ShardMoved(NodeUnreachable):
    """The node asked no longer holds the object's shard: nothing ran there."""


class ChainBroken(StorageError):
    """An earlier write of the same invocation's log was not made."""


class DataDirInUse(StorageError):
    """Another runtime (in this process or another) has the data folder open: two
    runtimes on one folder would both run the same alarms. Nothing was started."""


# Every error of the tree says it is `alarmtop.core.errors.X`, its public name: that is
# how it is recorded (an execution's error type, the audit log) and how users import it.
for _error in [v for v in list(globals().values())
               if isinstance(v, type) and issubclass(v, BaseException)
               and v.__module__ == __name__]:
    _error.__module__ = "alarmtop.core.errors"
