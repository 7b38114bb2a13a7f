"""Who may open a socket and how fast it may talk, without sockets: the Origin allow-list,
tokens for object sockets, connection caps, the token bucket, and where the server may
listen without TLS."""

from __future__ import annotations

import pytest

from alarmtop.server.guard import (
    CLOSE_INTERNAL,
    CLOSE_POLICY,
    CLOSE_TRY_AGAIN,
    ConnectionCaps,
    RateLimit,
    Refusal,
    bearer_token,
    check_bind,
    check_object_token,
    check_origin,
    expected_object_token,
    is_loopback,
    same_token,
)


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_no_origin_is_not_a_browser_and_passes() -> None:
    """The console and scripts send no Origin: let through to the token check."""
    assert check_origin(None, ()) is None
    assert check_origin(None, ["https://ops.example.com"]) is None


def test_browser_origins_need_the_allow_list() -> None:
    """None allowed by default; an allowed origin matches whatever its case or trailing
    slash; anything else (another site, "null" from a sandboxed page) is refused 1008."""
    refusal = check_origin("https://evil.example", ())
    assert refusal is not None and refusal.code == CLOSE_POLICY
    assert "https://evil.example" in refusal.reason and "--allow-origin" in refusal.reason
    allowed = ["https://Ops.Example.com/"]
    assert check_origin("https://ops.example.com", allowed) is None
    for other in ("https://ops.example.com.evil.example", "http://ops.example.com", "null"):
        assert check_origin(other, allowed) is not None, other


def test_a_long_origin_is_cut_in_the_reason() -> None:
    refusal = check_origin("https://" + "x" * 500, ())
    assert refusal is not None and len(refusal.reason) < 120


def test_bearer_token_from_the_header_or_the_query() -> None:
    """`Authorization: Bearer T` (any case of "Bearer") first, else `?token=T`."""
    assert bearer_token({"authorization": "Bearer abc"}, {}) == "abc"
    assert bearer_token({"authorization": "bearer  abc "}, {"token": ["q"]}) == "abc"
    assert bearer_token({}, {"token": ["q", "r"]}) == "q"
    assert bearer_token({"authorization": "Basic xyz"}, {}) is None
    assert bearer_token({}, {}) is None


class Open:
    pass


class NeedsEnv:
    web_socket_token_env = "DASH_TOKEN"


def test_expected_token_server_map_then_class_variable() -> None:
    """The server's map wins; else the class names an environment variable; a class that
    names an unset variable is refused to everyone (1011, saying which variable)."""
    assert expected_object_token("Open", Open, {}, {}) is None
    assert expected_object_token("Open", Open, {"Open": "m"}, {}) == "m"
    assert expected_object_token("NeedsEnv", NeedsEnv, {}, {"DASH_TOKEN": "e"}) == "e"
    assert expected_object_token("NeedsEnv", NeedsEnv, {"NeedsEnv": "m"},
                                 {"DASH_TOKEN": "e"}) == "m"
    for env in ({}, {"DASH_TOKEN": ""}):
        refusal = expected_object_token("NeedsEnv", NeedsEnv, {}, env)
        assert isinstance(refusal, Refusal) and refusal.code == CLOSE_INTERNAL
        assert "DASH_TOKEN" in refusal.reason


def test_check_object_token() -> None:
    assert check_object_token("C", None, None) is None
    assert check_object_token("C", "anything", None) is None
    missing = check_object_token("C", None, "s")
    assert missing is not None and missing.code == CLOSE_POLICY and "need a token" in \
        missing.reason
    wrong = check_object_token("C", "t", "s")
    assert wrong is not None and "wrong token" in wrong.reason
    assert check_object_token("C", "s", "s") is None


def test_same_token_never_raises_on_odd_text() -> None:
    assert same_token("a", "a") and not same_token("a", "b")
    assert not same_token("\ud800", "x")


def test_caps_in_total_and_per_address() -> None:
    """Each address has its own count; the total is over all; a refusal counts nothing;
    a release makes room again."""
    caps = ConnectionCaps(max_total=3, max_per_address=2)
    assert caps.admit("a") is None and caps.admit("a") is None
    per = caps.admit("a")
    assert per is not None and per.code == CLOSE_TRY_AGAIN and "from a" in per.reason
    assert caps.admit("b") is None
    full = caps.admit("c")
    assert full is not None and "server full" in full.reason
    assert caps.total == 3 and caps.by_address == {"a": 2, "b": 1}
    caps.release("a")
    assert caps.admit("c") is None
    for address in ("a", "b", "c"):
        caps.release(address)
    assert caps.total == 0 and not caps.by_address


def test_rate_limit_burst_then_refill() -> None:
    """A burst, then `per_s` a second; `rejected` counts refusals in a row."""
    now = FakeTime()
    limit = RateLimit(per_s=2.0, burst=3.0, now=now)
    assert [limit.allow() for _ in range(4)] == [True, True, True, False]
    assert limit.rejected == 1
    assert not limit.allow() and limit.rejected == 2
    now.now += 0.5  # one token back
    assert limit.allow() and limit.rejected == 0
    assert not limit.allow()
    now.now += 100  # never more than the burst
    assert sum(limit.allow() for _ in range(10)) == 3


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("LOCALHOST", True), ("0.0.0.0", False), ("::", False),
    ("192.168.1.10", False), ("example.com", False), ("", False)])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_non_loopback_without_tls_is_refused_unless_told() -> None:
    """Tokens in clear text beyond this machine need --insecure-no-tls; TLS or loopback
    need nothing."""
    with pytest.raises(ValueError, match="--insecure-no-tls") as info:
        check_bind("0.0.0.0", tls=False, insecure_no_tls=False)
    assert "--tls-cert" in str(info.value)
    check_bind("0.0.0.0", tls=True, insecure_no_tls=False)
    check_bind("0.0.0.0", tls=False, insecure_no_tls=True)
    check_bind("127.0.0.1", tls=False, insecure_no_tls=False)
