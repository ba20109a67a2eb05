"""The game store when the real server is killed (SIGKILL) while clients write games: after a
restart every move that was answered 2xx is there, and the file is a sound database."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from apps.xiangqi.api import replay
from apps.xiangqi.store import GameStore
from decision.serve.testing import free_port

GAMES = "/api/xiangqi/games"


def _call(url: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method,
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert 200 <= response.status < 300
        return json.loads(response.read())


def _serve(db: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]),
               OMP_NUM_THREADS="1")
    with log.open("ab") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "decision.cli", "xiangqi", "serve", "--db", str(db),
             "--model", "random", "--port", str(port)],
            env=env, stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            _call(url, "GET", f"{GAMES}/none")
        except urllib.error.HTTPError:  # a 404: the server answers
            return process, url
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise AssertionError("the server did not start")


@pytest.mark.slow
def test_every_answered_move_survives_a_killed_server(tmp_path: Path) -> None:
    db, log = tmp_path / "games.sqlite3", tmp_path / "server.log"
    process, url = _serve(db, log)
    answered: dict[str, dict[str, Any]] = {}  # game id -> the last state answered 2xx
    guard = threading.Lock()
    enough = threading.Event()

    def play(seed: int) -> None:
        try:
            game = _call(url, "POST", GAMES, {"model_side": "none"})
            with guard:
                answered[game["id"]] = game
            ply = 0
            while True:
                legal = _call(url, "GET", f"{GAMES}/{game['id']}/legal-moves")["legal_moves"]
                if not legal:
                    return
                move = legal[(seed * 7 + ply) % len(legal)]["iccs"]
                game = _call(url, "POST", f"{GAMES}/{game['id']}/moves",
                             {"move": move, "version": game["version"]})
                ply += 1
                with guard:
                    answered[game["id"]] = game
                    if sum(len(g["moves"]) for g in answered.values()) >= 40:
                        enough.set()
        except OSError:  # the server is gone: the request in flight got no answer
            return

    clients = [threading.Thread(target=play, args=(seed,)) for seed in range(4)]
    for client in clients:
        client.start()
    try:
        assert enough.wait(300), log.read_text()
        process.send_signal(signal.SIGKILL)  # the clients still writing
        assert process.wait() == -signal.SIGKILL
    finally:
        process.kill()
        for client in clients:
            client.join(120)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    store = GameStore(db)  # what a restarted server opens
    assert store.count() >= len(answered)  # a game created as the server died: unanswered
    for game_id, state in answered.items():
        record = store.get(game_id)
        moves = [m.iccs for m in record.moves]
        # a move in flight at the kill may be saved unanswered, never an answered one lost
        assert moves[: len(state["moves"])] == [m["iccs"] for m in state["moves"]]
        assert record.version == len(moves) + 1  # one version per write, moves only
        replay(record)  # every stored move legal
    process, url = _serve(db, log)  # and the restarted server serves them
    try:
        for game_id in answered:
            assert _call(url, "GET", f"{GAMES}/{game_id}")["version"] == store.get(game_id).version
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
