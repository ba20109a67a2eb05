"""The SQLite game store on its own: round trip, compare-and-swap, settings, schema guard."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from apps.xiangqi.store import (
    GameBusy,
    GameNotFound,
    GameStore,
    GameStoreUnusable,
    PlayedMove,
    StaleGameError,
    check_store_path,
    default_db_path,
)
from decision.errors import DecisionInputError

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
    with pytest.raises(GameStoreUnusable, match="schema version 99"):
        GameStore(path)
    with pytest.raises(GameStoreUnusable, match="schema version 99"):
        check_store_path(path)


@pytest.mark.parametrize(("tables", "reason"), [
    (["CREATE TABLE games (id INTEGER, name TEXT)"], "games table has other columns (id, name)"),
    (["CREATE TABLE users (id INTEGER)"], "another database (tables users)"),
])
def test_another_programs_database_is_refused_unmarked(
    tmp_path: Path, tables: list[str], reason: str
) -> None:
    # it was accepted at start-up and marked as a game store; every game request then failed
    path = tmp_path / "other.sqlite3"
    with sqlite3.connect(path) as conn:
        for statement in tables:
            conn.execute(statement)
    for check in (GameStore, check_store_path):
        with pytest.raises(GameStoreUnusable, match=re.escape(reason)):
            check(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal"


def test_a_store_written_before_the_version_mark_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "g.sqlite3"
    store = GameStore(path)
    game = store.create(START, "none")
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version=0")
    assert GameStore(path).get(game.id).start_fen == START


def _unusable_paths(tmp_path: Path) -> list[tuple[Path, str]]:
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "notes.txt").write_text("not a database, but long enough to be read as one " * 9)
    return [
        (tmp_path, "is a directory"),
        (tmp_path / "a-file" / "games.sqlite3", "not a directory"),
        (tmp_path / "a-file" / "deeper" / "games.sqlite3", "not a directory"),
        (tmp_path / "notes.txt", "not a database"),
    ]


def test_an_unusable_store_path_is_one_clear_error_naming_it(tmp_path: Path) -> None:
    """A directory, a path under a file or a file that is not SQLite: the store said
    'unable to open database file' (or raised an OSError) with a traceback, and a server on it
    answered 500s. Now it is a ``DecisionInputError`` (the commands exit 2 with its line)
    naming the path and the reason, from the store and from the start-up check alike."""
    for path, reason in _unusable_paths(tmp_path):
        for check in (GameStore, check_store_path):
            with pytest.raises(GameStoreUnusable) as info:
                check(path)
            err = info.value
            assert isinstance(err, DecisionInputError) and err.field == "DECISION_XIANGQI_DB"
            assert str(path) in err.message and reason in err.message, err.message
            assert "\n" not in err.message


def test_a_path_under_a_file_names_the_file_in_the_way(tmp_path: Path) -> None:
    """``decision xiangqi serve --db a-file/games.sqlite3`` said
    '...a-file/games.sqlite3: not a directory', as if the database path were meant to be a
    folder; the reason names the file that stands where a folder is needed, as the start-up
    check of ``decision serve`` already did."""
    (tmp_path / "a-file").write_text("not a folder")
    for path in (tmp_path / "a-file" / "games.sqlite3",
                 tmp_path / "a-file" / "deeper" / "games.sqlite3"):
        for check in (GameStore, check_store_path):
            with pytest.raises(GameStoreUnusable) as info:
                check(path)
            assert info.value.reason == f"{tmp_path / 'a-file'}: not a directory", info.value


def test_a_file_shorter_than_a_database_header_is_not_overwritten(tmp_path: Path) -> None:
    """SQLite took a one-byte file for an empty database: the store (and the start-up check,
    which opens it) turned someone's file into a game store. A file of no bytes is a new store."""
    for size in (1, 15):
        path = tmp_path / f"small-{size}"
        path.write_bytes(b"x" * size)
        for check in (GameStore, check_store_path):
            with pytest.raises(GameStoreUnusable, match="not a database"):
                check(path)
        assert path.read_bytes() == b"x" * size
    empty = tmp_path / "empty.sqlite3"
    empty.write_bytes(b"")
    assert GameStore(empty).path == empty and empty.stat().st_size > 0


def test_the_start_up_check_creates_nothing(tmp_path: Path) -> None:
    """``decision serve`` checks the store's path at start; it must not create the file (or its
    folders) of a store no request may ever use."""
    path = tmp_path / "new" / "folder" / "games.sqlite3"
    check_store_path(path)
    assert not (tmp_path / "new").exists()
    GameStore(path).create(START, "none")  # the first use creates them
    check_store_path(path)  # an existing, usable store


def _refused_when_unwritable(tmp_path: Path) -> None:
    path = tmp_path / "g.sqlite3"
    GameStore(path).create(START, "none")
    path.chmod(0o444)
    with pytest.raises(GameStoreUnusable, match="readonly"):
        GameStore(path)  # once: opened fine, then a 500 at the first move
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    with pytest.raises(GameStoreUnusable, match="not writable"):
        check_store_path(folder / "games.sqlite3")


# Run by root in a child process: drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (capset(2);
# any process may drop its own capabilities), then runs _refused_when_unwritable. Still root and
# the files' owner, but bound by their mode bits like any user. Exit 77: could not drop them.
_WITHOUT_DAC_OVERRIDE = """
import ctypes, importlib.util, sys
from pathlib import Path

class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

class Data(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in ("effective", "permitted", "inheritable")]

try:
    libc = ctypes.CDLL(None, use_errno=True)
    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    keep = ~((1 << 1) | (1 << 2)) & 0xFFFFFFFF  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
    for name in ("effective", "permitted", "inheritable"):
        setattr(data[0], name, getattr(data[0], name) & keep)
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
except (OSError, AttributeError) as exc:
    print(f"cannot drop CAP_DAC_OVERRIDE: {exc}", file=sys.stderr)
    sys.exit(77)
spec = importlib.util.spec_from_file_location("store_tests", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module._refused_when_unwritable(Path(sys.argv[2]))
"""


def test_an_unwritable_store_is_refused_at_once(tmp_path: Path) -> None:
    """A store file the process may not write, or a folder it may not create one in, is one
    clear error at start-up. Skipped as root before (root writes through any mode bits), which
    is how it runs here and in CI: root runs it in a child without the capability for that."""
    if os.geteuid() != 0:
        _refused_when_unwritable(tmp_path)
        return
    if not sys.platform.startswith("linux"):
        pytest.skip("root drops CAP_DAC_OVERRIDE with Linux's capset(2)")
    child = subprocess.run(
        [sys.executable, "-c", _WITHOUT_DAC_OVERRIDE, __file__, str(tmp_path)],
        cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=120)
    if child.returncode == 77:
        pytest.skip(child.stderr.strip())
    assert child.returncode == 0, child.stderr


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
