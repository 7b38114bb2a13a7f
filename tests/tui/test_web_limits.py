"""`alarmtop web`'s limits, pure: consoles per login and in all, terminal sizes, the
throttle of wrong tokens (on a clock the test moves), and the public origins."""

from __future__ import annotations

import pytest

from alarmtop.tui.web.limits import (
    MAX_HEIGHT,
    MAX_WIDTH,
    ConsoleCaps,
    LoginThrottle,
    clamp_size,
    origin_of,
    websocket_origins,
)


def test_consoles_are_capped_per_login_then_in_all() -> None:
    caps = ConsoleCaps(per_session=2, total=3)
    assert caps.refusal(1, 2) is None
    assert caps.refusal(2, 2) == ("this login has 2 consoles open (at most 2): close one "
                                  "first")
    assert caps.refusal(0, 3) == "server full: 3 consoles open (at most 3); retry later"


@pytest.mark.parametrize(("given", "size"), [
    ((1500, 1500), (MAX_WIDTH, MAX_HEIGHT)), ((100, 30), (100, 30)), ((0, -4), (20, 8)),
    (("120", "40"), (120, 40)), ((None, "tall"), (80, 24)), ((1e400, 2**70), (80, 200))])
def test_terminal_sizes_are_clamped(given: tuple[object, object],
                                    size: tuple[int, int]) -> None:
    assert clamp_size(*given) == size


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_wrong_tokens_are_throttled_per_address() -> None:
    clock = Clock()
    throttle = LoginThrottle(clock, burst=3, per_s=0.5)
    for _ in range(3):
        assert throttle.wait_s("10.0.0.1") == 0
        throttle.failed("10.0.0.1")
    assert throttle.wait_s("10.0.0.1") == 2  # one more every 2 s
    assert throttle.wait_s("10.0.0.2") == 0  # another address is not held back
    clock.now += 1
    assert throttle.wait_s("10.0.0.1") == 1
    clock.now += 1
    assert throttle.wait_s("10.0.0.1") == 0
    throttle.failed("10.0.0.1")
    assert throttle.wait_s("10.0.0.1") == 2


def test_the_throttle_forgets_addresses_that_calmed_down() -> None:
    clock = Clock()
    throttle = LoginThrottle(clock, burst=1, per_s=1, max_addresses=2)
    throttle.failed("a")
    throttle.failed("b")
    clock.now += 5
    throttle.failed("c")
    assert len(throttle._buckets) == 1  # a and b had filled again


def test_public_origins_are_checked_and_normalised() -> None:
    assert origin_of("https://Ops.Example.com/") == "https://ops.example.com"
    assert origin_of("http://10.0.0.5:8080") == "http://10.0.0.5:8080"
    for bad in ("ops.example.com", "ftp://x", "https://x/console", "https://u@x", "https://"):
        with pytest.raises(ValueError, match="origin"):
            origin_of(bad)
    assert websocket_origins(["https://a.io", "http://b:1"]) == ["wss://a.io", "ws://b:1"]
