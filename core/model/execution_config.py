"""Configuration of durable operations, mirroring the AWS Durable Execution SDK.

Durations are whole seconds; retry strategies are callables
`(error, attempts_made) -> RetryDecision`, built by `create_retry_strategy` from
a config or taken from `RetryPresets`: a thin layer over the one `RetryPolicy`
that alarms use too. All of it is pure: no I/O, and jitter comes from an
injected `random.Random` (the engine's seeded one, for a running execution).
"""

from __future__ import annotations

import enum
import json
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from alarmtop.core.model.alarm_policy import RetryPolicy, retry_after
from alarmtop.core.model.execution_errors import ValidationError


@dataclass(frozen=True)
class Duration:
    """A whole number of seconds (fractions are truncated, as in the AWS SDK)."""

    seconds: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.seconds, int) or isinstance(self.seconds, bool):
            raise ValidationError(f"Duration takes whole seconds, not {self.seconds!r}")
        if self.seconds < 0:
            raise ValidationError("Duration seconds must be positive")

    def to_seconds(self) -> int:
        return self.seconds

    @classmethod
    def from_seconds(cls, value: float) -> Duration:
        return cls(int(value))

    @classmethod
    def from_minutes(cls, value: float) -> Duration:
        return cls(int(value * 60))

    @classmethod
    def from_hours(cls, value: float) -> Duration:
        return cls(int(value * 3600))

    @classmethod
    def from_days(cls, value: float) -> Duration:
        return cls(int(value * 86400))


class JitterStrategy(enum.StrEnum):
    NONE = "NONE"
    FULL = "FULL"
    HALF = "HALF"

    @property
    def fraction(self) -> float:
        """The share of each delay drawn at random (`RetryPolicy.jitter`)."""
        return {"NONE": 0.0, "FULL": 1.0, "HALF": 0.5}[self.value]

    def finalize_delay(self, base: float, rng: random.Random | None = None) -> int:
        """Apply jitter, round up, and never go below one second."""
        r = (rng or _FALLBACK_RNG).random()
        if self is JitterStrategy.FULL:
            base = r * base
        elif self is JitterStrategy.HALF:
            base = base / 2 + r * base / 2
        return max(1, math.ceil(base))


# Only for a strategy called by hand with no rng anywhere: the engine always passes
# its own seeded one, so a running execution never draws from here (or from `random`).
_FALLBACK_RNG = random.Random()


@dataclass(frozen=True)
class RetryDecision:
    should_retry: bool
    delay: Duration = Duration(0)

    @property
    def delay_seconds(self) -> int:
        return self.delay.seconds

    @classmethod
    def retry(cls, delay: Duration) -> RetryDecision:
        return cls(True, delay)

    @classmethod
    def no_retry(cls) -> RetryDecision:
        return cls(False)


RetryStrategy = Callable[[BaseException, int], RetryDecision]


@dataclass(frozen=True)
class RetryStrategyConfig:
    """The AWS SDK's retry settings; `policy()` is the `RetryPolicy` they mean."""

    max_attempts: int = 3
    initial_delay: Duration = Duration(5)
    max_delay: Duration = Duration(300)
    backoff_rate: float = 2.0
    jitter_strategy: JitterStrategy = JitterStrategy.FULL
    retryable_errors: Sequence[str | re.Pattern[str]] | None = None
    retryable_error_types: Sequence[type[BaseException]] | None = None

    def policy(self) -> RetryPolicy:
        try:
            return RetryPolicy(
                max_retries=max(0, self.max_attempts - 1),
                initial_delay_s=float(self.initial_delay.seconds),
                backoff_rate=self.backoff_rate, max_delay_s=float(self.max_delay.seconds),
                jitter=JitterStrategy(self.jitter_strategy).fraction,
                retryable_errors=self.retryable_errors,
                retryable_error_types=self.retryable_error_types)
        except ValueError as exc:
            raise ValidationError(f"bad RetryStrategyConfig: {exc}") from None


class PolicyStrategy:
    """A retry strategy over one `RetryPolicy`: `(error, attempts_made) -> RetryDecision`,
    as in the AWS SDK, plus the rng to draw jitter from (the engine passes its own).

    Delays are whole seconds, at least one (durable waits are), rounded up."""

    __slots__ = ("policy", "rng")

    def __init__(self, policy: RetryPolicy, rng: random.Random | None = None) -> None:
        self.policy = policy
        self.rng = rng

    def __call__(self, error: BaseException, attempts_made: int,
                 rng: random.Random | None = None) -> RetryDecision:
        delay = retry_after(self.policy, error, attempts_made - 1,
                            rng or self.rng or _FALLBACK_RNG)
        if delay is None:
            return RetryDecision.no_retry()
        return RetryDecision.retry(Duration(max(1, math.ceil(delay))))


def decide_retry(strategy: RetryStrategy, error: BaseException, attempts_made: int,
                 rng: random.Random) -> RetryDecision:
    """Ask `strategy` about a failure, handing it `rng` when it takes one (a strategy
    of the user's own is a plain `(error, attempts) -> RetryDecision`)."""
    if isinstance(strategy, PolicyStrategy):
        return strategy(error, attempts_made, rng)
    return strategy(error, attempts_made)


def create_retry_strategy(config: RetryStrategyConfig | None = None,
                          rng: random.Random | None = None) -> RetryStrategy:
    """Exponential backoff: `min(initial * rate**(n-1), max)`, jittered, at least 1 s."""
    return PolicyStrategy((config or RetryStrategyConfig()).policy(), rng)


class RetryPresets:
    """The AWS SDK's ready-made strategies."""

    @staticmethod
    def none() -> RetryStrategy:
        return create_retry_strategy(RetryStrategyConfig(max_attempts=1))

    @staticmethod
    def default() -> RetryStrategy:
        """Used when a step names no strategy: 6 attempts, 5 s, x2, at most 60 s, full jitter."""
        return create_retry_strategy(RetryStrategyConfig(
            max_attempts=6, initial_delay=Duration(5), max_delay=Duration(60), backoff_rate=2))

    @staticmethod
    def transient() -> RetryStrategy:
        return create_retry_strategy(RetryStrategyConfig(
            max_attempts=3, backoff_rate=2, jitter_strategy=JitterStrategy.HALF))

    @staticmethod
    def critical() -> RetryStrategy:
        return create_retry_strategy(RetryStrategyConfig(
            max_attempts=10, initial_delay=Duration(1), max_delay=Duration(60),
            backoff_rate=1.5, jitter_strategy=JitterStrategy.NONE))

    @staticmethod
    def fixed(interval: Duration | None = None, max_attempts: int = 5) -> RetryStrategy:
        delay = interval or Duration(5)
        return create_retry_strategy(RetryStrategyConfig(
            max_attempts=max_attempts, initial_delay=delay, max_delay=delay, backoff_rate=1,
            jitter_strategy=JitterStrategy.NONE))


class StepSemantics(enum.StrEnum):
    AT_LEAST_ONCE_PER_RETRY = "AT_LEAST_ONCE_PER_RETRY"
    AT_MOST_ONCE_PER_RETRY = "AT_MOST_ONCE_PER_RETRY"


@dataclass(frozen=True)
class SerDes:
    """How an operation's value becomes checkpoint text and back."""

    serialize: Callable[[Any], str]
    deserialize: Callable[[str], Any]


# Built once: json.dumps with options makes a new encoder on every call (every step).
_json_dumps: Callable[[Any], str] = json.JSONEncoder(separators=(",", ":"),
                                                    allow_nan=False).encode
_json_loads: Callable[[str], Any] = json.loads


def _lenient_loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


JSON_SERDES = SerDes(_json_dumps, _json_loads)
RAW_SERDES = SerDes(str, lambda text: text)
# Callback payloads are stored as sent; they read back as JSON when they are JSON.
CALLBACK_SERDES = SerDes(lambda v: v if isinstance(v, str) else _json_dumps(v), _lenient_loads)


@dataclass(frozen=True)
class StepConfig:
    retry_strategy: RetryStrategy | None = None
    step_semantics: StepSemantics = StepSemantics.AT_LEAST_ONCE_PER_RETRY
    serdes: SerDes | None = None


@dataclass(frozen=True)
class CallbackConfig:
    timeout: Duration = Duration(0)  # 0: no timeout
    heartbeat_timeout: Duration = Duration(0)
    serdes: SerDes | None = None


@dataclass(frozen=True)
class WaitForCallbackConfig(CallbackConfig):
    retry_strategy: RetryStrategy | None = None


@dataclass(frozen=True)
class ChildConfig:
    serdes: SerDes | None = None
    sub_type: str | None = None


@dataclass(frozen=True)
class InvokeConfig:
    """How `invoke` encodes its payload and decodes the child's result text."""

    serdes_payload: SerDes | None = None
    serdes_result: SerDes | None = None
    tenant_id: str | None = None


@dataclass(frozen=True)
class CompletionConfig:
    """When a parallel/map batch is complete (the AWS SDK's rules)."""

    min_successful: int | None = None
    tolerated_failure_count: int | None = None
    tolerated_failure_percentage: float | None = None

    @staticmethod
    def first_successful() -> CompletionConfig:
        return CompletionConfig(min_successful=1)

    @staticmethod
    def all_completed() -> CompletionConfig:
        return CompletionConfig(tolerated_failure_percentage=100)

    @staticmethod
    def all_successful() -> CompletionConfig:
        return CompletionConfig(tolerated_failure_count=0, tolerated_failure_percentage=0)


class NestingType(enum.StrEnum):
    NESTED = "NESTED"
    FLAT = "FLAT"


@dataclass(frozen=True)
class ParallelConfig:
    max_concurrency: int | None = None
    completion_config: CompletionConfig = field(default_factory=CompletionConfig.all_successful)
    serdes: SerDes | None = None
    item_serdes: SerDes | None = None
    nesting_type: NestingType = NestingType.NESTED

    def __post_init__(self) -> None:
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValidationError("max_concurrency must be at least 1")


@dataclass(frozen=True)
class MapConfig:
    max_concurrency: int | None = None
    completion_config: CompletionConfig = field(default_factory=CompletionConfig)
    serdes: SerDes | None = None
    item_serdes: SerDes | None = None
    nesting_type: NestingType = NestingType.NESTED
    item_namer: Callable[[Any, int], str] | None = None

    def __post_init__(self) -> None:
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValidationError("max_concurrency must be at least 1")


@dataclass(frozen=True)
class WaitForConditionDecision:
    should_continue: bool
    delay: Duration = Duration(0)

    @classmethod
    def continue_waiting(cls, delay: Duration) -> WaitForConditionDecision:
        return cls(True, delay)

    @classmethod
    def stop_polling(cls) -> WaitForConditionDecision:
        return cls(False)


WaitStrategy = Callable[[Any, int], WaitForConditionDecision]


@dataclass(frozen=True)
class WaitForConditionConfig:
    wait_strategy: WaitStrategy
    initial_state: Any = None
    serdes: SerDes | None = None


@dataclass(frozen=True)
class WaitStrategyConfig:
    should_continue_polling: Callable[[Any], bool]
    max_attempts: int = 60
    initial_delay: Duration = Duration(5)
    max_delay: Duration = Duration(300)
    backoff_rate: float = 1.5
    jitter_strategy: JitterStrategy = JitterStrategy.FULL


class PollStrategy:
    """A wait strategy `(state, attempt) -> WaitForConditionDecision` built from a
    `WaitStrategyConfig`, drawing jitter from the rng it is handed (the engine's)."""

    __slots__ = ("config", "rng")

    def __init__(self, config: WaitStrategyConfig, rng: random.Random | None = None) -> None:
        self.config = config
        self.rng = rng

    def __call__(self, state: Any, attempt: int,
                 rng: random.Random | None = None) -> WaitForConditionDecision:
        from alarmtop.core.model.execution_errors import WaitForConditionError
        config = self.config
        if not config.should_continue_polling(state):
            return WaitForConditionDecision.stop_polling()
        if attempt >= config.max_attempts:
            raise WaitForConditionError(f"condition not met after {attempt} attempts")
        base = min(config.initial_delay.seconds * config.backoff_rate ** (attempt - 1),
                   config.max_delay.seconds)
        return WaitForConditionDecision.continue_waiting(
            Duration(config.jitter_strategy.finalize_delay(base, rng or self.rng)))


def decide_poll(strategy: WaitStrategy, state: Any, attempt: int,
                rng: random.Random) -> WaitForConditionDecision:
    """Ask a wait strategy about a polled state, handing it `rng` when it takes one."""
    if isinstance(strategy, PollStrategy):
        return strategy(state, attempt, rng)
    return strategy(state, attempt)


def create_wait_strategy(config: WaitStrategyConfig,
                         rng: random.Random | None = None) -> WaitStrategy:
    return PollStrategy(config, rng)
