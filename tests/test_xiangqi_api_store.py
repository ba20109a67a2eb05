"""The SQLite game store on its own: round trip, compare-and-swap, settings, schema guard."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from apps.xiangqi.store import (
    GameBusy,
    GameNotFound,
    GameStore,
    PlayedMove,
    StaleGameError,
    default_db_path,
)

START = "rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RNBAKABNR w - - 0 1"


def test_round_trip_and_version_bumps(tmp_path: Path) -> None:
    store = GameStore(tmp_path / "g.sqlite3")
    game = store.create(START, "black")
    assert game.version == 1 and game.moves == ()
    saved = store.save(game.with_moves((PlayedMove("h2e2", "human"),)))
    assert saved.version == 2
    again = GameStore(tmp_path / "g.sqlite3").get(game.id)  # another instance, same file
    assert again.moves == (PlayedMove("h2e2", "human"),) and again.version == 2
    assert again.start_fen == START and again.model_side == "black"
    assert store.count() == 1


def test_stale_write_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    store = GameStore(tmp_path / "g.sqlite3")
    game = store.create(START, "none")
    store.save(game.with_moves((PlayedMove("h2e2", "human"),)))
    with pytest.raises(StaleGameError) as info:
        store.save(game.with_moves((PlayedMove("b2e2", "human"),)))  # based on version 1
    assert info.value.expected == 1 and info.value.actual == 2
    assert store.get(game.id).moves == (PlayedMove("h2e2", "human"),)


def test_unknown_game_and_bad_values(tmp_path: Path) -> None:
    store = GameStore(tmp_path / "g.sqlite3")
    with pytest.raises(GameNotFound):
        store.get("nope")
    game = store.create(START, "red")
    store.delete(game.id)
    with pytest.raises(GameNotFound):
        store.save(game)
    with pytest.raises(ValueError, match="model_side"):
        store.create(START, "blue")
    other = store.create(START, "red")
    with pytest.raises(ValueError, match="played by"):
        store.save(other.with_moves((PlayedMove("h2e2", "robot"),)))


def test_newer_schema_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "g.sqlite3"
    GameStore(path)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version=99")
    with pytest.raises(RuntimeError, match="schema version 99"):
        GameStore(path)


def test_default_path_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DECISION_XIANGQI_DB", raising=False)
    monkeypatch.setenv("DECISION_DATA_DIR", str(tmp_path / "data"))
    assert default_db_path() == tmp_path / "data" / "xiangqi.sqlite3"
    monkeypatch.setenv("DECISION_XIANGQI_DB", str(tmp_path / "x.db"))
    assert default_db_path() == tmp_path / "x.db"
    monkeypatch.delenv("DECISION_XIANGQI_DB")
    monkeypatch.delenv("DECISION_DATA_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_db_path() == tmp_path / "xdg" / "decision" / "xiangqi.sqlite3"
    store = GameStore()  # creates the folder
    assert store.path.parent.is_dir()


def test_one_lock_per_game_refuses_a_second_change_of_that_game_only(tmp_path: Path) -> None:
    """A request on a game whose lock is held is refused at once (nobody waits for a lock);
    every other game's lock is free meanwhile; the lock of a game nobody is changing is
    forgotten (the registry does not grow with the games)."""
    store = GameStore(tmp_path / "g.sqlite3")
    with store.locked("a"):
        with pytest.raises(GameBusy, match="'a' is busy"):
            with store.locked("a"):
                pass
        done = threading.Event()

        def other_games() -> None:
            for i in range(200):  # some ids share a hash % 64 with "a"
                with store.locked(f"game-{i}"):
                    pass
            done.set()

        threading.Thread(target=other_games, daemon=True).start()
        assert done.wait(5), "another game waited for the lock of game 'a'"
    with store.locked("a"):  # free again once released
        pass
    assert store._busy == set()
