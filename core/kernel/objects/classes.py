"""The object classes a runtime hosts, by name, each with its retry policy."""

from __future__ import annotations

from alarmtop.core.kernel.objects.durable_object import DurableObject
from alarmtop.core.model.alarm_policy import RetryPolicy
from alarmtop.core.model.errors import InvalidArgument, UnknownClass


class ObjectClasses:
    """Registered `DurableObject` classes, addressed by class name (a folder name under
    the data dir, so a Python identifier), and their retry policies."""

    def __init__(self, default_policy: RetryPolicy) -> None:
        self.default_policy = default_policy
        self._classes: dict[str, type[DurableObject]] = {}
        self._policies: dict[str, RetryPolicy] = {}

    @property
    def by_name(self) -> dict[str, type[DurableObject]]:
        """The registry itself (the host looks classes up in it on every wake)."""
        return self._classes

    def register(self, cls: type[DurableObject], *,
                 retry_policy: RetryPolicy | None = None) -> type[DurableObject]:
        """Make `cls` addressable by its class name; optionally with its own retry policy."""
        if not (isinstance(cls, type) and issubclass(cls, DurableObject)):
            raise InvalidArgument(f"register() takes a DurableObject subclass, not {cls!r}")
        name = cls.__name__
        if not name.isidentifier():
            # The class name is a folder under the data dir: '..' or 'a/b' would escape it.
            raise InvalidArgument(f"object class names must be Python identifiers, not "
                                  f"{name!r}; rename the class")
        existing = self._classes.get(name)
        if existing is not None and existing is not cls:
            raise InvalidArgument(f"another class named {name!r} is already registered")
        self._classes[name] = cls
        if retry_policy is not None:
            self._policies[name] = retry_policy
        return cls

    def __contains__(self, name: object) -> bool:
        return name in self._classes

    def registered(self, class_name: str) -> type[DurableObject] | None:
        """The class registered under `class_name` (None: none is), waking nothing."""
        return self._classes.get(class_name)

    def name_of(self, cls: type[DurableObject] | str) -> str:
        """The registered name of a class (or of a name); `UnknownClass` when none."""
        name = cls if isinstance(cls, str) else getattr(cls, "__name__", repr(cls))
        if name not in self._classes:
            raise UnknownClass(name, list(self._classes))
        return name

    def policy_for(self, class_name: str) -> RetryPolicy:
        return self._policies.get(class_name, self.default_policy)
