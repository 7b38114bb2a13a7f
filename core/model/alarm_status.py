"""`AlarmStatus`: the public, JSON-ready view of one alarm."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from alarmtop.core.model.alarm_policy import AlarmRecord, Attempt, RetryPolicy, is_near_exhaustion


@dataclass(frozen=True)
class AlarmStatus:
    object_class: str
    object_name: str
    scheduled_ms: int
    state: str  # 'pending' | 'running' | 'retrying' | 'dead'
    retry_count: int
    next_attempt_ms: int | None
    last_error: str | None
    attempts: list[Attempt]
    max_retries: int
    near_exhaustion: bool
    attempt_count: int = 0  # every failed attempt; `attempts` keeps the first few and the last
    paused: bool = False  # held by an operator: fires nothing until resumed (state unchanged)
    paused_ms: int | None = None  # since when

    @property
    def object(self) -> str:
        return f"{self.object_class}/{self.object_name}"

    @staticmethod
    def of(rec: AlarmRecord, policy: RetryPolicy) -> AlarmStatus:
        return AlarmStatus(rec.object_class, rec.object_name, rec.scheduled_ms, rec.state.value,
                           rec.retry_count, rec.next_attempt_ms, rec.last_error,
                           list(rec.attempts), policy.max_retries,
                           is_near_exhaustion(rec, policy),
                           max(rec.attempt_count, len(rec.attempts)),
                           rec.paused_ms is not None, rec.paused_ms)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
