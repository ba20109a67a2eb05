"""SQLite persistence of Xiangqi games, safe under concurrent requests.

A game is stored as its start FEN plus the list of moves played (ICCS, and who played each), so
the current position is always a replay of legal moves and a restart of the server loses nothing.

Concurrency has two layers:

* in one process, a per-game lock makes read-compute-write on a game exclusive: a second request
  on a game that one is still changing is refused at once (:class:`GameBusy`) instead of waiting,
  so two requests on one game never interleave, nothing ever waits for a lock (a burst on one game
  holds no server threads), and requests on different games never wait for each other;
* across processes (or two app instances on the same file), every write is a compare-and-swap on
  the ``version`` column inside a ``BEGIN IMMEDIATE`` transaction: a write whose base version is
  stale is refused with :class:`StaleGameError` instead of overwriting the other writer's move.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from decision.errors import DecisionInputError

SCHEMA_VERSION = 1
DB_ENV = "DECISION_XIANGQI_DB"
_MODEL_SIDES = ("red", "black", "none")
_PLAYERS = ("human", "model")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS games (
    id TEXT PRIMARY KEY,
    start_fen TEXT NOT NULL,
    model_side TEXT NOT NULL CHECK (model_side IN ('red', 'black', 'none')),
    moves TEXT NOT NULL,
    version INTEGER NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
)
"""


class GameNotFound(LookupError):
    """No game with that id in the store."""

    def __init__(self, game_id: str) -> None:
        super().__init__(f"no game with id {game_id!r}")
        self.game_id = game_id


class StaleGameError(RuntimeError):
    """A write based on an out-of-date version of a game (someone else wrote first)."""

    def __init__(self, game_id: str, expected: int, actual: int | None) -> None:
        super().__init__(
            f"game {game_id!r} changed while this request ran (expected version {expected}, "
            f"found {actual}); reload the game and try again"
        )
        self.game_id = game_id
        self.expected = expected
        self.actual = actual


@dataclass(frozen=True)
class PlayedMove:
    """One move of a game: its ICCS text and who played it (``human`` or ``model``)."""

    iccs: str
    by: str

    def to_json(self) -> dict[str, str]:
        return {"iccs": self.iccs, "by": self.by}


@dataclass(frozen=True)
class GameRecord:
    """A stored game. ``version`` counts the writes; it is the compare-and-swap token."""

    id: str
    start_fen: str
    model_side: str
    moves: tuple[PlayedMove, ...] = field(default_factory=tuple)
    version: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0

    def with_moves(self, moves: tuple[PlayedMove, ...]) -> GameRecord:
        """A copy with another move list (same version: :meth:`GameStore.save` bumps it)."""
        return GameRecord(
            self.id, self.start_fen, self.model_side, moves, self.version,
            self.created_at, self.updated_at,
        )


class GameBusy(RuntimeError):
    """Another request of this process is changing the game right now (it holds its lock)."""

    def __init__(self, game_id: str) -> None:
        super().__init__(
            f"game {game_id!r} is busy: another request on it (a move, the model's move or an "
            "undo) is still running; reload the game and try again"
        )
        self.game_id = game_id


class GameStoreUnusable(DecisionInputError):
    """The store's file cannot be used: a directory, not writable, not a game database."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(
            f"cannot keep the Xiangqi games in {path}: {reason} (set {DB_ENV}, or --db for "
            "decision xiangqi serve, to a writable SQLite file)",
            DB_ENV,
        )
        self.path = path
        self.reason = reason


def _os_reason(e: OSError) -> str:
    """``[Errno 20] Not a directory: '/x/y'`` as ``/x/y: not a directory``."""
    what = (e.strerror or str(e)).lower()
    return f"{e.filename}: {what}" if e.filename else what


def check_store_path(path: str | os.PathLike[str] | None = None) -> None:
    """Raise :class:`GameStoreUnusable` unless a store could be kept at ``path`` (default:
    :func:`default_db_path`), creating nothing: an existing file is opened as the store; for a
    missing one, its nearest existing folder must be a folder this process may write in.
    ``decision serve`` runs it at start, when no game may ever be played."""
    path = Path(path) if path is not None else default_db_path()
    if path.exists():
        GameStore(path)
        return
    folder = _existing_folder(path)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise GameStoreUnusable(path, f"{folder}: not writable")


def _existing_folder(path: Path) -> Path:
    """The nearest existing folder above ``path``; one that is a file -> GameStoreUnusable."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise GameStoreUnusable(path, f"{folder}: not a directory")
    return folder


_SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


def _refuse_other_file(path: Path) -> None:
    """Raise :class:`GameStoreUnusable` for an existing, non-empty file that is no SQLite
    database: SQLite refuses most such files, but took a file shorter than its header (one
    byte) for an empty database and overwrote it."""
    try:
        with path.open("rb") as f:
            head = f.read(len(_SQLITE_HEADER))
    except FileNotFoundError:
        return
    if head and head != _SQLITE_HEADER:
        raise GameStoreUnusable(path, "file is not a database (it has no SQLite header)")


_COLUMNS = ("id", "start_fen", "model_side", "moves", "version", "created_at", "updated_at")


def _refuse_another_database(path: Path, conn: sqlite3.Connection) -> None:
    """Raise :class:`GameStoreUnusable` for a SQLite file not yet marked as a game store that
    holds other tables, or a ``games`` table of other columns: another program's database, which
    would be marked as ours and fail at every request (``CREATE TABLE IF NOT EXISTS`` keeps a
    foreign ``games`` table as it is)."""
    tables = [row[0] for row in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
    others = sorted(set(tables) - {"games"})
    if others:
        raise GameStoreUnusable(path, f"it is another database (tables {', '.join(others)})")
    if "games" in tables:
        columns = tuple(row[1] for row in conn.execute("PRAGMA table_info(games)"))
        if columns != _COLUMNS:
            raise GameStoreUnusable(
                path, f"its games table has other columns ({', '.join(columns)})")


def default_db_path() -> Path:
    """Where games live unless configured: ``$DECISION_XIANGQI_DB``, else ``xiangqi.sqlite3``
    in ``$DECISION_DATA_DIR``, else in ``$XDG_DATA_HOME/decision`` (``~/.local/share/decision``).
    """
    explicit = os.environ.get(DB_ENV)
    if explicit:
        return Path(explicit)
    data_dir = os.environ.get("DECISION_DATA_DIR")
    if not data_dir:
        xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        data_dir = str(Path(xdg) / "decision")
    return Path(data_dir) / "xiangqi.sqlite3"


class GameStore:
    """Games in one SQLite file. Thread-safe; every call opens its own short-lived connection."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, timeout_s: float = 30.0):
        self.path = Path(path) if path is not None else default_db_path()
        self.timeout_s = timeout_s
        self._busy: set[str] = set()  # ids of the games being changed; guarded by _busy_guard
        self._busy_guard = threading.Lock()
        # Opened (and written) now, so an unusable file is one clear error at start-up, not a
        # 500 at every request.
        try:
            if self.path.is_dir():
                raise GameStoreUnusable(self.path, "it is a directory")
            # the folder first: under a file, opening the path failed naming the path itself
            # ("games.sqlite3: not a directory"), not the file in the way
            _existing_folder(self.path)
            _refuse_other_file(self.path)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._connect() as conn:
                found = conn.execute("PRAGMA user_version").fetchone()[0]
                if found not in (0, SCHEMA_VERSION):
                    raise GameStoreUnusable(
                        self.path, f"it has game schema version {found}; this code reads "
                        f"version {SCHEMA_VERSION}",
                    )
                if found == 0:
                    _refuse_another_database(self.path, conn)
                # WAL lets readers run while a writer commits; it is a property of the file.
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(_SCHEMA)
                # Written even when already set: SQLite opens a file it may not write read-only
                # without a word, and the first move would fail.
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except OSError as e:
            raise GameStoreUnusable(self.path, _os_reason(e)) from None
        except sqlite3.Error as e:
            raise GameStoreUnusable(self.path, str(e)) from None

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # isolation_level=None: autocommit, so BEGIN IMMEDIATE below is ours to issue.
        conn = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()

    @contextmanager
    def locked(self, game_id: str) -> Iterator[None]:
        """Hold the in-process lock of one game (read, compute, then :meth:`save` under it), or
        raise :class:`GameBusy` at once when another request holds it: nobody waits for a lock.

        Each game has its own lock, so a slow model move on one game never delays another; a
        game's lock exists only while it is held.
        """
        with self._busy_guard:
            if game_id in self._busy:
                raise GameBusy(game_id)
            self._busy.add(game_id)
        try:
            yield
        finally:
            with self._busy_guard:
                self._busy.discard(game_id)

    def create(self, start_fen: str, model_side: str) -> GameRecord:
        """Store a new game with no moves and return it."""
        if model_side not in _MODEL_SIDES:
            raise ValueError(f"model_side must be one of {_MODEL_SIDES}, got {model_side!r}")
        now = time.time()
        record = GameRecord(uuid.uuid4().hex, start_fen, model_side, (), 1, now, now)
        with self._connect() as conn:
            conn.execute(
                "INSERT INTO games (id, start_fen, model_side, moves, version, created_at, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (record.id, start_fen, model_side, "[]", record.version, now, now),
            )
        return record

    def get(self, game_id: str) -> GameRecord:
        """The stored game, or :class:`GameNotFound`."""
        with self._connect() as conn:
            row = conn.execute(
                "SELECT id, start_fen, model_side, moves, version, created_at, updated_at "
                "FROM games WHERE id = ?",
                (game_id,),
            ).fetchone()
        if row is None:
            raise GameNotFound(game_id)
        moves = tuple(PlayedMove(m["iccs"], m["by"]) for m in json.loads(row[3]))
        return GameRecord(row[0], row[1], row[2], moves, row[4], row[5], row[6])

    def save(self, record: GameRecord) -> GameRecord:
        """Write ``record.moves`` if the stored version is still ``record.version``.

        Returns the record with its new version; raises :class:`StaleGameError` when another
        writer got there first and :class:`GameNotFound` when the game is gone.
        """
        for move in record.moves:
            if move.by not in _PLAYERS:
                raise ValueError(f"a move is played by one of {_PLAYERS}, got {move.by!r}")
        moves_json = json.dumps([m.to_json() for m in record.moves])
        now = time.time()
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")  # take the write lock before reading the version
            try:
                row = conn.execute(
                    "SELECT version FROM games WHERE id = ?", (record.id,)
                ).fetchone()
                if row is None:
                    raise GameNotFound(record.id)
                if row[0] != record.version:
                    raise StaleGameError(record.id, record.version, row[0])
                conn.execute(
                    "UPDATE games SET moves = ?, version = ?, updated_at = ? WHERE id = ?",
                    (moves_json, record.version + 1, now, record.id),
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return GameRecord(
            record.id, record.start_fen, record.model_side, record.moves,
            record.version + 1, record.created_at, now,
        )

    def delete(self, game_id: str) -> None:
        """Remove a game (no error if it is already gone)."""
        with self._connect() as conn:
            conn.execute("DELETE FROM games WHERE id = ?", (game_id,))

    def count(self) -> int:
        """How many games are stored."""
        with self._connect() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM games").fetchone()[0])
