"""Errors of durable executions (part of the tree in `alarmtop.core.model.errors`).

::

    AlarmtopError
     └── DurableExecutionError
          ├── ValidationError (also InvalidArgument)   bad config or input; nothing changed
          ├── UnknownExecution (also NotFound)         no execution with that id / name
          ├── UnknownCallback (also NotFound)          no callback with that id
          ├── CallbackAlreadyCompleted (also InvalidArgument)
          ├── InvalidExecutionState                    operator action does not apply now
          │    └── ReplayDivergence                    a redrive/fork whose replay check failed
          ├── IllegalTransition                        a status change the table refuses (a bug)
          ├── StepInterruptedError                     an at-most-once step was cut short
          └── DurableOperationError                    raised into handler code, rebuilt
               ├── StepError                           identically on replay from the log
               ├── ChildContextError
               ├── WaitForConditionError
               ├── InvokeError
               └── CallbackError
                    ├── CallbackExternalError
                    ├── CallbackTimeoutError
                    └── CallbackSubmitterError

Control flow, not errors (BaseException, so `except Exception` in handler code
never swallows them): `SuspendExecution` (and `ReplayFrontier`, where a replay-only
run stops), `InvocationCrash`, `CheckpointFailed`, `NonDeterministicExecutionError`,
`ExecutionAborted`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from alarmtop.core.model.divergence import Divergence

from alarmtop.core.model.errors import AlarmtopError, InvalidArgument, NotFound


class DurableExecutionError(AlarmtopError):
    """Base of every error about durable executions."""


class ValidationError(DurableExecutionError, InvalidArgument):
    """A configuration or input that cannot be accepted."""


class UnknownExecution(DurableExecutionError, NotFound):
    def __init__(self, what: str, hint: str = "") -> None:
        super().__init__(f"unknown execution {what}{'; ' + hint if hint else ''}")
        self.what = what


class UnknownCallback(DurableExecutionError, NotFound):
    def __init__(self, callback_id: str) -> None:
        super().__init__(f"no callback with id {callback_id!r}; use the callback_id that "
                         "create_callback() returned (see describe(execution_id)['callbacks'])")
        self.callback_id = callback_id


class CallbackAlreadyCompleted(DurableExecutionError, InvalidArgument):
    def __init__(self, callback_id: str, status: str) -> None:
        super().__init__(f"callback {callback_id!r} is already {status}; a callback completes "
                         "once, nothing was changed")
        self.callback_id = callback_id
        self.status = status


class InvalidExecutionState(DurableExecutionError):
    """An operator action that does not apply to the execution as it is now."""


class ReplayDivergence(InvalidExecutionState):
    """A redrive or fork refused because its replay check found a divergence."""

    def __init__(self, execution_id: str, action: str, report: dict[str, Any]) -> None:
        super().__init__(f"{action} of {execution_id!r} refused: {report['summary']} "
                         f"(version {report['version']}); fix the handler or register the "
                         "version that replays, or pass force=True to run it anyway")
        self.execution_id = execution_id
        self.action = action
        self.report = report


class IllegalTransition(DurableExecutionError):
    """A status change the transition table does not allow: a bug in the engine,
    refused before anything is written."""

    def __init__(self, what: str, ident: str, current: str, to: str) -> None:
        super().__init__(f"illegal {what} status change for {ident!r}: {current} -> {to}; "
                         "nothing was changed (report this: the engine tried it)")
        self.what, self.ident, self.current, self.to = what, ident, current, to


class DurableOperationError(DurableExecutionError):
    """An operation failed; carries the original error's type and message."""

    def __init__(self, message: str, error_type: str | None = None, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.error_type = error_type
        self.data = data

    def to_error_object(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ErrorType": self.error_type or type(self).__name__,
                               "ErrorMessage": self.message}
        if self.data is not None:
            out["ErrorData"] = self.data
        return out

    @classmethod
    def from_error_object(cls, obj: dict[str, Any]) -> DurableOperationError:
        return cls(obj.get("ErrorMessage", ""), obj.get("ErrorType"), obj.get("ErrorData"))


class StepError(DurableOperationError):
    pass


class StepInterruptedError(DurableExecutionError):
    """An at-most-once step was found started but unfinished: it may or may not have run."""


class ChildContextError(DurableOperationError):
    pass


class WaitForConditionError(DurableOperationError):
    pass


class InvokeError(DurableOperationError):
    pass


class CallbackError(DurableOperationError):
    pass


class CallbackExternalError(CallbackError):
    pass


class CallbackTimeoutError(CallbackError):
    pass


class CallbackSubmitterError(CallbackError):
    pass


def error_object(exc: BaseException) -> dict[str, Any]:
    """The AWS `ErrorObject` of an exception: fully qualified type unless builtin."""
    if isinstance(exc, DurableOperationError):
        return exc.to_error_object()
    cls = type(exc)
    name = cls.__qualname__
    if cls.__module__ != "builtins":
        name = f"{cls.__module__}.{name}"
    return {"ErrorType": name, "ErrorMessage": str(exc)}


class _ControlFlow(BaseException):
    """Unwinds an invocation; never an error of the handler's own."""


class SuspendExecution(_ControlFlow):
    """The invocation cannot go on until a timer, a callback or an operator."""

    def __init__(self, reason: str, until_ms: int | None = None, op_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.until_ms = until_ms
        self.op_id = op_id


class InvocationCrash(_ControlFlow):
    """An injected crash: the invocation is abandoned exactly as if the process died."""


class CheckpointFailed(_ControlFlow):
    """A checkpoint could not be written (the database was locked, full, failing): the
    invocation is abandoned as after a crash and runs again from what landed. Not an
    `Exception`, so a handler's `except Exception` cannot swallow it."""


class ReplayFrontier(SuspendExecution):
    """A replay-only run reached an operation the log has no outcome for: there it
    would run or write, so it stops. A suspension, so a batch's other branches
    carry on replaying."""


class NonDeterministicExecutionError(_ControlFlow):
    """Replay met an operation that differs from the log (`divergence` says how)."""

    def __init__(self, message: str, op_id: str,
                 divergence: Divergence | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.op_id = op_id
        self.divergence = divergence


class ExecutionAborted(_ControlFlow):
    """An operator aborted the execution while it waited for a human."""


# Each error says it is `alarmtop.core.durable.errors.X`, its public name: that is how it
# is recorded in an execution's history and how users import it.
for _error in [v for v in list(globals().values())
               if isinstance(v, type) and issubclass(v, BaseException)
               and v.__module__ == __name__]:
    _error.__module__ = "alarmtop.core.durable.errors"
