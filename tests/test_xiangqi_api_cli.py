"""``decision xiangqi`` subcommands: perft and a terminal game driven through stdin."""

from __future__ import annotations

import argparse
import io

from apps.xiangqi import Board, Move
from apps.xiangqi.cli import main, register, run_play

MATE_IN_TWO = "4k4/9/9/9/9/9/9/1R7/R8/3K5 w - - 0 1"


class FirstMovePlayer:
    def choose(self, board: Board) -> Move:
        return board.legal_moves[0]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_perft_counts(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["perft", "--depth", "2"]) == 0
    assert "perft(2) = 1920" in capsys.readouterr().out
    assert main(["perft", "--depth", "1", "--divide"]) == 0
    out = capsys.readouterr().out
    assert "h2e2: 1" in out and "perft(1) = 44" in out
    # a negative depth: one line with the command's prefix, as other bad input (it had none)
    assert main(["perft", "--depth", "-1"]) == 2
    assert capsys.readouterr().err == ("decision xiangqi: error (depth): --depth must be >= 0, "
                                       "got -1\n")


def test_terminal_game_to_mate_with_undo_and_bad_input() -> None:
    args = parse(["xiangqi", "play", "--model-side", "black", "--fen", MATE_IN_TWO])
    typed = "a1b2\nmoves\na1a8\nundo\nzz\na1a8\nb2b9\n"
    out = io.StringIO()
    status = run_play(args, io.StringIO(typed), out, player_factory=FirstMovePlayer)
    text = out.getvalue()
    assert status == 0
    assert "not played: illegal move a1b2" in text  # a chariot does not move diagonally
    assert "a1a2 a1a3" in text  # the 'moves' listing
    assert text.count("model plays e9f9 = K5=6") == 2  # once before and once after the undo
    assert "not played: 'zz' is not an ICCS move" in text
    assert text.rstrip().endswith("game over: 1-0 (checkmate)")


def test_terminal_game_ends_on_end_of_input() -> None:
    args = parse(["xiangqi", "play", "--model-side", "red"])
    out = io.StringIO()
    assert run_play(args, io.StringIO(""), out, player_factory=FirstMovePlayer) == 0
    assert "model plays" in out.getvalue()  # the model (Red) opened before input ran out


def test_loading_the_model_is_announced_only_when_a_model_loads(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from apps.xiangqi import player_settings

    args = parse(["xiangqi", "play", "--model-side", "red", "--model", "greedy"])
    out = io.StringIO()
    assert run_play(args, io.StringIO(""), out) == 0
    assert "model plays" in out.getvalue() and "loading the model" not in out.getvalue()

    monkeypatch.setattr(player_settings, "player_from_setting", lambda *a, **k: FirstMovePlayer())
    args = parse(["xiangqi", "play", "--model-side", "red", "--model", "default"])
    out = io.StringIO()
    assert run_play(args, io.StringIO(""), out) == 0
    assert "loading the model..." in out.getvalue()


def test_a_bad_model_setting_exits_2_before_the_game_or_server_starts(
    tmp_path, capsys, monkeypatch  # type: ignore[no-untyped-def]
) -> None:
    """A --model path without a checkpoint, or a bad DECISION_XIANGQI_SEARCH, failed only when
    the model was first asked to move (a 503 from the server, a traceback in the terminal)."""
    from decision.cli import main as decision_main

    absent = str(tmp_path / "absent")
    for argv in (["xiangqi", "play", "--model", absent],
                 ["xiangqi", "serve", "--model", absent, "--port", "1"]):
        assert decision_main(argv) == 2
        err = capsys.readouterr().err
        assert "--model (or DECISION_XIANGQI_MODEL)" in err and "absent" in err
        assert "Xiangqi board at" not in err
    # from `decision serve`, whose --model is the decision model, the variable alone is named
    monkeypatch.setenv("DECISION_XIANGQI_MODEL", absent)
    assert decision_main(["serve", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "DECISION_XIANGQI_MODEL must be" in err and "--model" not in err
    monkeypatch.delenv("DECISION_XIANGQI_MODEL")
    monkeypatch.setenv("DECISION_XIANGQI_SEARCH", "deep")
    assert decision_main(["xiangqi", "play"]) == 2
    assert "DECISION_XIANGQI_SEARCH" in capsys.readouterr().err


def test_an_unusable_game_store_exits_2_with_one_line_naming_it(
    tmp_path, capsys, monkeypatch  # type: ignore[no-untyped-def]
) -> None:
    """``decision xiangqi serve --db DIR`` printed a traceback; ``decision serve`` with
    DECISION_XIANGQI_DB=DIR started, then answered every game request 500."""
    from decision.cli import main as decision_main

    folder = tmp_path / "a-folder"
    folder.mkdir()
    assert decision_main(["xiangqi", "serve", "--db", str(folder), "--model", "random",
                          "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(folder) in err and "is a directory" in err, err
    assert "DECISION_XIANGQI_DB" in err and "Traceback" not in err
    assert "Xiangqi board at" not in err
    # decision serve: refused before the model is loaded (a missing model would say so instead)
    monkeypatch.setenv("DECISION_XIANGQI_DB", str(folder))
    monkeypatch.setenv("DECISION_XIANGQI_MODEL", "random")
    assert decision_main(["serve", "--model", str(tmp_path / "absent"), "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(folder) in err and "is a directory" in err, err
    assert "cannot load the model" not in err


def test_an_app_built_in_code_on_an_unusable_store_answers_503(
    tmp_path, monkeypatch  # type: ignore[no-untyped-def]
) -> None:
    """Without the commands' start-up check (the routes mounted in code, as ``decision serve``'s
    ``create_app`` does), the store is opened at the first request: 503 naming the path, as
    for a model that cannot be loaded, and tried again on the next request."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from apps.xiangqi.api import router

    app = FastAPI()
    app.include_router(router)
    monkeypatch.setenv("DECISION_XIANGQI_DB", str(tmp_path))
    client = TestClient(app)
    r = client.post("/api/xiangqi/games")
    assert r.status_code == 503, r.text
    err = r.json()["error"]
    assert err["type"] == "unavailable" and err["field"] == "DECISION_XIANGQI_DB"
    assert str(tmp_path) in err["message"] and "is a directory" in err["message"]
    monkeypatch.setenv("DECISION_XIANGQI_DB", str(tmp_path / "games.sqlite3"))
    assert client.post("/api/xiangqi/games").status_code == 201


def test_serve_refuses_a_port_out_of_range_and_python_m_reports_bad_input(
    tmp_path, capsys  # type: ignore[no-untyped-def]
) -> None:
    """``--port 70000`` ended ``decision xiangqi serve`` with an OverflowError traceback from the
    socket; ``python -m apps.xiangqi.cli`` printed a traceback for a bad FEN."""
    from decision.cli import main as decision_main

    for port in ("70000", "-1"):
        assert decision_main(["xiangqi", "serve", "--model", "random", "--port", port,
                              "--db", str(tmp_path / "games.sqlite3")]) == 2
        err = capsys.readouterr().err
        assert err == ("decision xiangqi: error (port): --port must be from 0 to 65535, "
                       f"got {port}\n")
    assert main(["perft", "--depth", "1", "--fen", "garbage"]) == 2
    assert capsys.readouterr().err.startswith("decision xiangqi: error (fen): FEN needs")


def test_the_board_address_is_one_a_browser_takes() -> None:
    """``--host ::1`` printed http://::1:8000/xiangqi/ (an IPv6 host needs brackets) and
    ``--port 0`` a port-0 address that no browser reaches."""
    from apps.xiangqi.cli import board_url

    assert board_url("127.0.0.1", 8000) == "http://127.0.0.1:8000/xiangqi/"
    assert board_url("::1", 8000) == "http://[::1]:8000/xiangqi/"
    assert board_url("example.org", 80) == "http://example.org:80/xiangqi/"
    assert ":0/" not in board_url("127.0.0.1", 0) and "uvicorn" in board_url("127.0.0.1", 0)


def test_serve_refuses_the_first_port_past_the_range(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from decision.cli import main as decision_main

    assert decision_main(["xiangqi", "serve", "--model", "random", "--port", "65536",
                          "--db", str(tmp_path / "games.sqlite3")]) == 2
    assert capsys.readouterr().err == ("decision xiangqi: error (port): --port must be from 0 "
                                       "to 65535, got 65536\n")
