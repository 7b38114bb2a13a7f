"""The lobby's policy, pure: who makes room when connections that showed no token fill
it. A newcomer always gets in; the address holding most of the lobby loses its oldest;
so a flood from one address only ever pushes out its own, and from one address the
sockets held longest go first."""

from __future__ import annotations

import pytest

from alarmtop.server.lobby import FULL, Lobby


def test_a_lobby_with_room_lets_everyone_in() -> None:
    lobby: Lobby[str] = Lobby(3)
    assert lobby.enter("a1", "A") == [] and lobby.enter("b1", "B") == []
    assert lobby.enter("a1", "A") == []  # the same connection twice counts once
    assert len(lobby) == 2 and lobby.waiting("A") == 1 and "b1" in lobby


def test_when_full_the_address_holding_most_gives_up_its_oldest() -> None:
    lobby: Lobby[str] = Lobby(4)
    for key in ("a1", "a2", "a3", "b1"):
        lobby.enter(key, "A" if key[0] == "a" else "B")
    assert lobby.enter("c1", "C") == [("a1", FULL)]
    assert lobby.enter("b2", "B") == [("a2", FULL)]  # A still holds most...
    assert lobby.enter("a4", "A") == [("b1", FULL)]  # ...then B does
    assert (lobby.waiting("A"), lobby.waiting("B"), lobby.waiting("C")) == (2, 1, 1)
    assert "server full for unauthenticated connections; retry" in FULL.reason
    assert FULL.code == 1013


def test_a_flood_from_one_address_never_pushes_out_another() -> None:
    lobby: Lobby[str] = Lobby(8)
    lobby.enter("console", "10.0.0.1")
    for i in range(1000):
        evicted = lobby.enter(f"flood{i}", "10.6.6.6")
        assert all(key.startswith("flood") for key, _ in evicted)
    assert "console" in lobby and len(lobby) == 8


def test_ties_go_to_the_oldest() -> None:
    lobby: Lobby[str] = Lobby(3)
    for key, address in (("b1", "B"), ("a1", "A"), ("c1", "C")):
        lobby.enter(key, address)
    assert lobby.enter("d1", "D") == [("b1", FULL)]


def test_from_one_address_the_oldest_go_first() -> None:
    lobby: Lobby[str] = Lobby(8)
    for i in range(300):
        lobby.enter(f"silent{i}", "127.0.0.1")
    lobby.enter("console", "127.0.0.1")
    assert "console" in lobby and "silent299" in lobby and "silent292" not in lobby
    assert len(lobby) == 8


def test_leaving_frees_the_place_and_is_idempotent() -> None:
    lobby: Lobby[str] = Lobby(1)
    lobby.enter("a", "A")
    assert lobby.leave("a") is True and lobby.leave("a") is False
    assert lobby.enter("b", "B") == [] and lobby.waiting("A") == 0


def test_a_lobby_holds_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Lobby(0)
