"""The decision model as the Xiangqi player: a random-weight tiny DecisionModel chooses moves.

Its weights are random, so its moves are arbitrary; what is tested is the plumbing and the
guarantee: it reads the rendered position, answers a ``choice`` among the legal moves, and so
always plays a legal move, alone, through the game API, and inside ``decision serve``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from apps.xiangqi import BLACK, RED, Board
from apps.xiangqi.api import create_app
from apps.xiangqi.core import Move
from apps.xiangqi.model_player import ModelPlayer
from apps.xiangqi.player_settings import (
    player_from_setting,
    pooling_setting,
    search_depth_setting,
)
from apps.xiangqi.players import GreedyPlayer, RandomPlayer
from apps.xiangqi.pooling import SymmetryPooling
from apps.xiangqi.render import move_question, position_document, sorted_legal_iccs
from apps.xiangqi.repetition import repetition_safe_moves
from apps.xiangqi.search import MATE, SearchConfig, best_score, move_scores
from apps.xiangqi.search_guided import SearchGuidedPlayer, sound_moves

GAMES = "/api/xiangqi/games"


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoint_dir: Path) -> Path:
    return tiny_checkpoint_dir


@pytest.fixture(scope="module")
def model(checkpoint: Path) -> Any:
    from decision import load_model

    return load_model(str(checkpoint))


class SpyModel:
    """Passes ``decide`` through to the real model and keeps what it was asked."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.asked: list[tuple[str, list[dict[str, Any]]]] = []

    def decide(self, document: str, questions: list[dict[str, Any]], **kw: Any) -> Any:
        from decision.joint.engine import decide

        self.asked.append((document, questions))
        return decide(self.model, document, questions, **kw)


def test_model_reads_the_position_and_answers_a_legal_move(model: Any) -> None:
    spy = SpyModel(model)
    player = ModelPlayer(spy)
    board = Board()
    board.push_iccs("h2e2")
    choice = player.choose_with_info(board)
    assert choice.move in board.legal_moves
    assert choice.confidence is not None and 0.0 < choice.confidence <= 1.0
    document, questions = spy.asked[-1]
    assert "Side to move: black" in document and "Last move: h2e2" in document
    assert questions[0]["answer"] == {"type": "choice", "options": sorted_legal_iccs(board)}


def test_the_player_plays_the_move_it_scores_most_probable(model: Any) -> None:
    from decision.joint.engine import decide

    board = Board()
    board.push_iccs("h2e2")
    choice = ModelPlayer(model).choose_with_info(board)  # the default decoder: "score"
    document, question = position_document(board), move_question(board)
    scored = decide(model, document, [question], return_probabilities=True, score_options=True)
    probs = scored.answers[0].option_probabilities
    assert choice.move.iccs() == max(probs, key=probs.get)
    assert choice.confidence == pytest.approx(probs[choice.move.iccs()])
    denoised = ModelPlayer(model, decoder="token").choose_with_info(board)
    assert denoised.move in board.legal_moves
    with pytest.raises(ValueError, match="unknown move decoder"):
        ModelPlayer(model, decoder="beam")


def test_single_legal_move_needs_no_model(model: Any) -> None:
    spy = SpyModel(model)
    board = Board("4k4/9/9/9/9/9/9/1R7/R8/3K5 w - - 0 1")
    board.push_iccs("a1a8")
    choice = ModelPlayer(spy).choose_with_info(board)
    assert choice.move.iccs() == "e9f9" and choice.confidence == 1.0 and spy.asked == []


def test_game_api_with_the_model_playing_red(tmp_path: Path, model: Any) -> None:
    client = TestClient(create_app(tmp_path / "games.sqlite3", ModelPlayer(model, "tiny")))
    g = client.post(GAMES, json={"model_side": "red"}).json()
    for _ in range(2):
        r = client.post(f"{GAMES}/{g['id']}/model-move")
        assert r.status_code == 200, r.text
        g = r.json()
        info = g["model_move"]
        assert info["source"] == "tiny" and 0.0 < info["confidence"] <= 1.0
        assert g["moves"][-1] == {**g["moves"][-1], "iccs": info["iccs"], "by": "model"}
        r = client.post(f"{GAMES}/{g['id']}/moves", json={"move": g["legal_moves"][0]})
        assert r.status_code == 200, r.text
    replay = Board()
    for m in r.json()["moves"]:
        replay.push_iccs(m["iccs"])  # every stored move, the model's included, is legal


def test_inside_decision_serve_the_model_answers_through_the_worker(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from decision.serve.app import create_app as create_service
    from decision.serve.settings import ServeSettings
    from decision.serve.testing import running_server

    monkeypatch.setenv("DECISION_XIANGQI_DB", str(tmp_path / "served.sqlite3"))
    monkeypatch.setenv("DECISION_XIANGQI_MODEL", "default")
    app = create_service(ServeSettings(model_path=str(checkpoint)))
    with running_server(app) as base, httpx.Client(base_url=base, timeout=60) as http:
        assert http.get("/xiangqi/").status_code == 200
        g = http.post(GAMES, json={"model_side": "black"}).json()
        http.post(f"{GAMES}/{g['id']}/moves", json={"move": "h2e2"})
        r = http.post(f"{GAMES}/{g['id']}/model-move")
        assert r.status_code == 200, r.text
        state = r.json()
        assert state["model_move"]["source"].startswith("default-model")
        assert state["moves"][1]["by"] == "model" and state["turn"] == "red"
        metrics = http.get("/metrics").text
    # The move went through the service's worker: one batch was decided.
    batches = [line for line in metrics.splitlines()
               if line.startswith("decision_batch_size_count")]
    assert batches and float(batches[0].split()[-1]) >= 1, metrics
    assert (tmp_path / "served.sqlite3").exists()


def test_a_pooled_model_move_through_the_services_worker(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model alone pooling from ply 0 inside ``decision serve`` with the service's own model:
    the four images go through the worker one by one (ServiceModel has no ``decide_many``) and
    their option probabilities come back, so the move is the pooled one and legal."""
    from decision.serve.app import create_app as create_service
    from decision.serve.settings import ServeSettings
    from decision.serve.testing import running_server

    monkeypatch.setenv("DECISION_XIANGQI_DB", str(tmp_path / "served.sqlite3"))
    monkeypatch.setenv("DECISION_XIANGQI_MODEL", "default")
    monkeypatch.setenv("DECISION_XIANGQI_SEARCH", "0")
    monkeypatch.setenv("DECISION_XIANGQI_POOLING", "0")
    app = create_service(ServeSettings(model_path=str(checkpoint)))
    with running_server(app) as base, httpx.Client(base_url=base, timeout=60) as http:
        g = http.post(GAMES, json={"model_side": "red"}).json()
        r = http.post(f"{GAMES}/{g['id']}/model-move")
        assert r.status_code == 200, r.text
        state = r.json()
        metrics = http.get("/metrics").text
    move = state["moves"][0]["iccs"]
    assert Board().is_legal(Move.from_iccs(move))
    # The same player outside the service, on the same weights, pools to the same move.
    from decision import load_model

    local = ModelPlayer(load_model(str(checkpoint)), pooling=SymmetryPooling(from_ply=0))
    assert local.choose(Board()).iccs() == move
    assert state["model_move"]["confidence"] == pytest.approx(
        local.choose_with_info(Board()).confidence, abs=1e-4)
    requests = [line for line in metrics.splitlines()
                if line.startswith("decision_batch_size_sum")]
    assert requests and float(requests[0].split()[-1]) >= 4, metrics


def test_model_moves_that_fill_the_route_threads_do_not_deadlock_the_service(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model move holds one of the app's route threads (anyio's default limiter, 40) while it
    waits on the service's ``decide``; that must not need another token of the same limiter,
    or as many concurrent model moves as there are tokens would wait on each other forever.
    The limiter is shrunk to 1 token here, so one move would show it (then 2 for two moves)."""
    import anyio.to_thread

    from decision.serve.app import create_app as create_service
    from decision.serve.settings import ServeSettings
    from decision.serve.testing import running_server

    monkeypatch.setenv("DECISION_XIANGQI_DB", str(tmp_path / "served.sqlite3"))
    monkeypatch.setenv("DECISION_XIANGQI_MODEL", "default")
    monkeypatch.setenv("DECISION_XIANGQI_SEARCH", "0")
    app = create_service(ServeSettings(model_path=str(checkpoint)))

    @app.post("/test/route-threads/{n}")
    async def route_threads(n: int) -> None:
        anyio.to_thread.current_default_thread_limiter().total_tokens = n

    with running_server(app) as base, httpx.Client(base_url=base, timeout=60) as http:
        games = [http.post(GAMES, json={"model_side": "red"}).json()["id"] for _ in range(3)]
        http.post(f"{GAMES}/{games[2]}/model-move").raise_for_status()  # the player is loaded

        def model_move(game_id: str) -> int:
            with httpx.Client(base_url=base, timeout=20) as client:
                try:
                    return client.post(f"{GAMES}/{game_id}/model-move").status_code
                except httpx.TimeoutException:
                    return -1  # deadlocked

        http.post("/test/route-threads/1").raise_for_status()
        assert model_move(games[0]) == 200
        http.post(f"{GAMES}/{games[0]}/undo").raise_for_status()
        http.post("/test/route-threads/2").raise_for_status()
        with ThreadPoolExecutor(2) as pool:
            codes = list(pool.map(model_move, games[:2]))
    assert codes == [200, 200], codes


def test_player_settings() -> None:
    assert isinstance(player_from_setting("random"), RandomPlayer)
    assert isinstance(player_from_setting("greedy"), GreedyPlayer)
    from decision.errors import CheckpointError

    with pytest.raises(CheckpointError):
        player_from_setting("/nonexistent/checkpoint")


def test_auto_refuses_xiangqi_weights_without_their_config(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An export moves config.json into models/xiangqi last (and removes it first): ``auto``
    took a directory without it for no Xiangqi model at all and played the untrained default
    model instead, cached by the service until its restart. It refuses to load now (the service
    answers 503 and asks again at the next model move)."""
    import shutil

    from apps.xiangqi import player_settings
    from decision.errors import CheckpointError

    shipped = tmp_path / "xiangqi"
    shutil.copytree(checkpoint, shipped)
    monkeypatch.setattr(player_settings, "XIANGQI_CHECKPOINT", shipped)
    assert player_from_setting("auto", search=0).name == "xiangqi-model"
    (shipped / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json"):
        player_from_setting("auto", search=0)
    shutil.rmtree(shipped)  # no Xiangqi model at all: the default model, as before
    assert player_from_setting("auto", search=0).name == "default-model (untrained on xiangqi)"


def test_search_settings(checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert type(player_from_setting(str(checkpoint), search=0)) is ModelPlayer
    assert isinstance(player_from_setting(str(checkpoint)), SearchGuidedPlayer)  # the default
    monkeypatch.setenv("DECISION_XIANGQI_SEARCH", "0")
    assert search_depth_setting() == 0
    for bad in ("deep", "-1", "9"):
        monkeypatch.setenv("DECISION_XIANGQI_SEARCH", bad)
        with pytest.raises(ValueError, match="DECISION_XIANGQI_SEARCH"):
            player_from_setting(str(checkpoint))


def test_pooling_settings(checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from apps.xiangqi.pooling import POOL_FROM_PLY

    monkeypatch.delenv("DECISION_XIANGQI_POOLING", raising=False)
    # the default, auto: pooled for the model alone, as is behind the search
    assert pooling_setting().from_ply == POOL_FROM_PLY and pooling_setting(depth=3) is None
    assert player_from_setting(str(checkpoint), search=0).pooling.from_ply == POOL_FROM_PLY
    assert player_from_setting(str(checkpoint), search=2).pooling is None
    assert pooling_setting("off") is None and pooling_setting("on", depth=3) is not None
    assert pooling_setting("on").from_ply == POOL_FROM_PLY
    assert pooling_setting(" 7 ").from_ply == 7 and pooling_setting(0).from_ply == 0
    assert pooling_setting("OFF") is None
    monkeypatch.setenv("DECISION_XIANGQI_POOLING", "on")
    alone = player_from_setting(str(checkpoint), search=0)
    guided = player_from_setting(str(checkpoint), search=2)
    assert type(alone) is ModelPlayer and alone.pooling.from_ply == POOL_FROM_PLY
    assert isinstance(guided, SearchGuidedPlayer) and guided.pooling.from_ply == POOL_FROM_PLY
    assert pooling_setting("off") is None  # the argument before the environment
    for bad in ("yes", "-1", "2.5", "\u00b2"):
        monkeypatch.setenv("DECISION_XIANGQI_POOLING", bad)
        with pytest.raises(ValueError, match="DECISION_XIANGQI_POOLING"):
            player_from_setting(str(checkpoint))
    assert isinstance(player_from_setting("greedy"), GreedyPlayer)  # no model, not read


def test_a_pooled_player_from_the_setting_plays_a_legal_move_in_the_middle_game(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With pooling from ply 0, every position is asked in its four images (four decodes)."""
    monkeypatch.setenv("DECISION_XIANGQI_POOLING", "0")
    player = player_from_setting(str(checkpoint), search=0)
    spy = SpyModel(player.model)
    player.model = spy
    board = Board()
    choice = player.choose_with_info(board)
    assert board.is_legal(choice.move) and len(spy.asked) == 4



def test_a_bad_search_setting_is_a_503_naming_it_not_a_500(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The setting is read when the player is built (the first model move): a bad value is the
    API's JSON 503 with the message, and the next request, once it is fixed, plays."""
    monkeypatch.setenv("DECISION_XIANGQI_SEARCH", "5")
    client = TestClient(create_app(tmp_path / "games.sqlite3",
                                   lambda: player_from_setting(str(checkpoint))))
    game = client.post(GAMES, json={"model_side": "red"}).json()
    r = client.post(f"{GAMES}/{game['id']}/model-move")
    assert r.status_code == 503, r.text
    assert r.json()["error"]["type"] == "unavailable"
    assert "DECISION_XIANGQI_SEARCH" in r.json()["error"]["message"]
    monkeypatch.setenv("DECISION_XIANGQI_SEARCH", "0")
    assert client.post(f"{GAMES}/{game['id']}/model-move").status_code == 200

def test_guided_player_keeps_sound_model_moves_and_replaces_blunders(model: Any) -> None:
    config = SearchConfig(depth=2)
    alone = ModelPlayer(SpyModel(model))
    guided = SearchGuidedPlayer(SpyModel(model), search=config, margin=1.0)
    positions = [Board("4k4/9/9/4r4/9/R3p4/9/9/9/3K5 w")]  # a4e4 loses the chariot
    board = Board()
    for iccs in ("h2e2", "h9g7", "h0g2", "c6c5", "b0c2", "b9c7", "e2e6"):
        board.push_iccs(iccs)
        positions.append(board.copy())  # the last: a cannon takes a soldier and is exposed
    for position in positions:
        floor = best_score(position, config) - 1.0
        scores = move_scores(position, config=config)
        model_move = alone.choose(position)
        choice = guided.choose_with_info(position)
        assert scores[choice.move] >= floor  # the guided move is never a blunder
        if scores[model_move] >= floor:
            assert choice.move == model_move and not choice.source.endswith("+search")
        else:  # replaced by the sound move the model likes best
            assert choice.source.endswith("+search")
    assert guided.overrides == sum(
        1 for p in positions
        if move_scores(p, config=config)[alone.choose(p)] < best_score(p, config) - 1.0
    )


class _FixedAnswers:
    """A stand-in model that answers one move and gives every option a set probability."""

    def __init__(self, answer: str, probabilities: dict[str, float]) -> None:
        self.answer, self.probabilities = answer, probabilities

    def decide(self, document: str, questions: list[Any], **kw: Any) -> Any:
        from types import SimpleNamespace

        options = questions[0]["answer"]["options"]
        probs = {o: self.probabilities.get(o, 0.0) for o in options} \
            if kw.get("return_probabilities") else None
        answer = SimpleNamespace(value=self.answer, confidence=0.5, option_probabilities=probs)
        return SimpleNamespace(answers=[answer])


def test_a_vetoed_answer_gives_way_to_the_likeliest_sound_move() -> None:
    board = Board("4k4/9/9/4r4/9/R3p4/9/9/9/3K5 w")
    # the model wants the losing capture, then a4d4 (next to the soldier: lost too), a4b4 (sound)
    fake = _FixedAnswers("a4e4", {"a4e4": 0.5, "a4d4": 0.3, "a4b4": 0.15, "a4a9": 0.05})
    guided = SearchGuidedPlayer(fake, margin=1.0)
    choice = guided.choose_with_info(board)
    assert choice.move.iccs() == "a4b4" and choice.confidence == 0.15
    assert choice.source.endswith("+search") and guided.overrides == 1
    # a sound answer is played as it is
    keep = SearchGuidedPlayer(_FixedAnswers("a4a9", {}), margin=1.0).choose_with_info(board)
    assert keep.move.iccs() == "a4a9" and keep.confidence == 0.5


def test_moves_that_let_the_opponent_repeat_a_third_time_are_avoided() -> None:
    from apps.xiangqi.repetition import repetition_classes

    board = Board()
    for iccs in "a0a1 i9i8 h0g2 a9a8 a1a0 i8i9 i0i1 i9i8 i1i0 b9c7 b0c2".split():
        board.push_iccs(iccs)
    risky, quiet = board.parse_iccs("c7b9"), board.parse_iccs("h9g7")
    board.push(risky)  # a new position, but Red's c2b0 then makes a third occurrence
    assert board.repetition_count() == 1
    board.push_iccs("c2b0")
    assert board.is_repetition(3)
    board.pop()
    board.pop()
    assert repetition_classes(board, {risky, quiet}) == ({quiet}, {risky, quiet})


# A won game the guided player (depth 3, margin 0) lost to the random mover by perpetual check:
# its only move within the margin, b9b8, checks for the third time in the same cycle.
PERPETUAL = ("h2e2 h7h1 b2c2 b7e7 c2c6 e7i7 c3c4 h1c1 c6c1 i7e7 c1c9 d9e8 c9a9 b9d8 h0g2 e7h7 "
             "c4c5 h7h2 e2h2 d8c6 c5c6 i9i7 b0c2 e8f7 a0b0 i7h7 b0b9 e9e8 h2h9 g6g5 b9b8 e8e7 "
             "b8b7 e7e8 h9f9 h7h5 a9g9 h5i5 g9i9 g5g4 i9i5 g4g3 b7b8 e8e7 b8b7 e7e8 b7b8 e8e9 "
             "b8b9 e9e8")


def test_a_perpetual_check_gives_way_to_the_best_move_that_does_not_repeat() -> None:
    board = Board()
    for iccs in PERPETUAL.split():
        board.push_iccs(iccs)
    config = SearchConfig(depth=3)
    check = board.parse_iccs("b9b8")
    scores = move_scores(board, config=config)
    assert scores[check] == max(scores.values())  # the search alone would play it
    board.push(check)
    assert board.is_repetition(3)
    board.pop()
    sound = sound_moves(board, config, margin=0.0)
    assert sound and check not in sound


def test_a_perpetual_check_by_the_opponent_is_not_escaped_by_giving_material() -> None:
    # Black's chariot checks from a0 and a1 in turn while Red's general steps e0-e1. The cycle
    # is Black's perpetual check, so its third occurrence wins for Red. Stepping back to e1 only
    # repeats it; the one other move, c5c0, puts the cannon in the way and loses it. The guided
    # player gave the cannon away rather than repeat.
    board = Board("3k5/9/9/9/r1C5R/9/9/9/9/4K4 b - - 0 1")
    for iccs in "a5a0 e0e1 a0a1 e1e0 a1a0".split():
        board.push_iccs(iccs)
    config = SearchConfig(depth=3)
    assert board.repetition_count() == 2 and best_score(board, config) == 0.0
    assert move_scores(board, config=config)[board.parse_iccs("c5c0")] == -4.5
    assert sound_moves(board, config, margin=0.0) == {board.parse_iccs("e0e1")}
    board.push_iccs("e0e1")
    board.push_iccs("a0a1")
    # e1e0 lets Black's check make the third occurrence: a win for Red, not a danger
    assert board.parse_iccs("e1e0") in sound_moves(board, config, margin=0.0)
    board.push_iccs("e1e0")
    board.push_iccs("a1a0")
    outcome = board.outcome()
    assert outcome is not None and outcome.winner == RED


def test_a_repetition_is_not_escaped_into_a_mate() -> None:
    # Red's general steps f1-f2 and back while Black's chariot goes d6-d8 and back, no checks:
    # f1f2 now reaches a position the second time (at worst a draw by repetition); the one other
    # move, e3e4, lets d6f6 mate. With no sound move left that does not repeat, the player took
    # the best of the others however bad, and walked into the mate to avoid a draw.
    board = Board("9/9/4k4/3r5/9/9/4P4/6n2/5K3/9 w - - 0 1")
    for iccs in "f1f2 d6d8 f2f1 d8d6".split():
        board.push_iccs(iccs)
    config = SearchConfig(depth=3)
    step, push = board.parse_iccs("f1f2"), board.parse_iccs("e3e4")
    scores = move_scores(board, config=config)
    assert scores[push] < -MATE / 2 < scores[step] == best_score(board, config)
    assert sound_moves(board, config, margin=0.0) == {step}
    guided = SearchGuidedPlayer(_FixedAnswers("e3e4", {"e3e4": 0.9, "f1f2": 0.1}))
    assert guided.choose(board) == step
    board.push(push)
    board.push_iccs("d6f6")
    assert board.is_checkmate()


def test_a_move_that_wins_by_the_repetition_rule_is_not_vetoed_for_material() -> None:
    # Black's chariot checks Red's general round and round; f0f1 makes the third occurrence of
    # that perpetual check and wins at once. The search, which does not know the rule, scored
    # it as a quiet move and kept only f0e0, which takes the chariot (+9).
    board = Board("1p2p4/3k3Cc/1r7/9/9/9/6r2/9/9/5K3 b - - 0 1", strict=False)
    for iccs in ("b7b0 f0f1 g3f3 f1e1 b0b1 e1e0 f3e3 e0f0 b1b0 f0f1 b0f0 f1f0 e3e0 f0f1 e0f0 "
                 "f1e1 f0e0 e1f1 e0e1 f1f0 e1e0").split():
        board.push_iccs(iccs)
    wins, takes = board.parse_iccs("f0f1"), board.parse_iccs("f0e0")
    for depth in (1, 2, 3):
        config = SearchConfig(depth=depth)
        assert move_scores(board, config=config)[takes] > move_scores(board, config=config)[wins]
        assert sound_moves(board, config, margin=0.0) == {wins}
    assert SearchGuidedPlayer(_FixedAnswers("f0e0", {"f0e0": 0.9})).choose(board) == wins
    board.push(wins)
    outcome = board.outcome()
    assert outcome is not None and outcome.winner == RED


@pytest.mark.parametrize(("clock", "wins"), [(111, True), (112, False), (113, False)])
def test_a_perpetual_check_the_no_capture_draw_ends_first_is_no_win(clock: int, wins: bool) -> None:
    # The position of the test above, `clock` plies after the last capture: Red's e0e1 reaches
    # the second occurrence of a position of Black's perpetual check, which Red wins when the
    # cycle is played once more, three plies later (a1a0, the third occurrence of the position
    # after a5a0), unless the 120-ply draw comes first. The replay judged only the cycle's end
    # (where the repetition, checked before the clock, won), so a draw partway was not seen.
    from apps.xiangqi.repetition import repeats_to_win, repetition_classes

    board = Board(_with_clock("3k5/9/9/9/r1C5R/9/9/9/9/4K4 b - - 0 1", clock))
    for iccs in "a5a0 e0e1 a0a1 e1e0 a1a0".split():
        board.push_iccs(iccs)
    step = board.parse_iccs("e0e1")
    board.push(step)
    assert board.repetition_count() == 2 and board.outcome() is None
    assert repeats_to_win(board, RED) is wins
    played = board.copy()  # the rules' verdict on the cycle played once more
    for iccs in "a0a1 e1e0 a1a0".split():
        if played.outcome() is None:
            played.push_iccs(iccs)
    end = played.outcome()
    assert end is not None and (end.winner == RED) is wins
    board.pop()
    assert repetition_classes(board, {step}) == (({step}, {step}) if wins else (set(), set()))


def test_a_repetition_the_player_would_lose_or_draw_is_still_avoided() -> None:
    from apps.xiangqi.repetition import repetition_classes

    # the same cycle with the colours' parts swapped in meaning: Red is the side that checks
    # (from a9 and a8) and Black's general steps; Red repeating would lose by perpetual check
    board = Board("4k4/9/9/9/R1c5r/9/9/9/9/3K5 w - - 0 1")
    for iccs in "a5a9 e9e8 a9a8 e8e9 a8a9 e9e8".split():
        board.push_iccs(iccs)
    repeat = board.parse_iccs("a9a8")  # the same check again: Red's perpetual
    board.push(repeat)
    assert board.repetition_count() == 2
    board.pop()
    safe, fresh = repetition_classes(board, {repeat})
    assert safe == set() and fresh == set()


class _Prefers:
    """A stand-in model that answers the first move of ``order`` among the options it is given,
    and keeps the options."""

    def __init__(self, order: list[str]) -> None:
        self.order: list[str] = order
        self.options: list[list[str]] = []

    def decide(self, document: str, questions: list[Any], **kw: Any) -> Any:
        from types import SimpleNamespace

        options = questions[0]["answer"]["options"]
        self.options.append(options)
        value = next(o for o in self.order if o in options)
        return SimpleNamespace(answers=[SimpleNamespace(value=value, confidence=0.5,
                                                        option_probabilities=None)])


# Red's chariot checks from a8 and a9 in turn while Black's general steps e9-e8; Red, checking
# on every move, loses the third occurrence of any position of the cycle. From the first FEN
# Black's move makes the first third occurrence; from the second (the chariot already checking,
# Black to move), Red's own. In the third the chariots step back and forth without a check:
# the third occurrence is a draw.
PERPETUAL_RED = ("4k4/R8/9/9/9/9/9/9/9/3K5 w - - 0 1", "a8a9 e9e8 a9a8 e8e9".split())
PERPETUAL_RED_OWN = ("R3k4/9/9/9/9/9/9/9/9/3K5 b - - 0 1", "e9e8 a9a8 e8e9 a8a9".split())
QUIET_CYCLE = ("5k2r/9/9/9/9/9/9/9/9/R2K5 w - - 0 1", "a0a1 i9i8 a1a0 i8i9".split())


@pytest.mark.parametrize(("game", "played", "avoided", "instead", "winner"), [
    (PERPETUAL_RED_OWN, 7, "a8a9", "a8a7", BLACK),  # Red's own move would lose
    (PERPETUAL_RED, 6, "a9a8", "a9a7", BLACK),  # Black's reply e8e9 would make Red lose
    (QUIET_CYCLE, 7, "i8i9", "i8i7", None),  # Black's own move would draw
    (QUIET_CYCLE, 6, "a1a0", "a1a2", None),  # Black's reply i8i9 would draw
])
def test_the_model_alone_is_not_offered_a_move_that_ends_the_game_by_repetition(
    game: tuple[str, list[str]], played: int, avoided: str, instead: str, winner: bool | None
) -> None:
    fen, cycle = game
    board = Board(fen)
    for iccs in (cycle * 2)[:played]:
        board.push_iccs(iccs)
    move = board.parse_iccs(avoided)
    assert set(repetition_safe_moves(board)) == set(board.legal_moves) - {move}
    fake = _Prefers([avoided, instead])
    choice = ModelPlayer(fake).choose_with_info(board)
    assert choice.move.iccs() == instead and avoided not in fake.options[-1]
    for iccs in (cycle * 2)[played:]:  # what the rule spared the mover: the end at ply 8
        assert board.outcome() is None
        board.push_iccs(iccs)
    outcome = board.outcome()
    assert outcome is not None and outcome.winner == winner


def test_a_repetition_the_rules_give_to_the_mover_stays_an_option() -> None:
    # the same cycle from Black's side: Black's e8e9 makes the third occurrence of Red's
    # perpetual check, a win for Black, so it is not left out
    fen, cycle = PERPETUAL_RED
    board = Board(fen)
    for iccs in (cycle * 2)[:7]:
        board.push_iccs(iccs)
    assert set(repetition_safe_moves(board)) == set(board.legal_moves)


def test_a_check_that_only_repeats_once_more_stays_an_option() -> None:
    fen, cycle = PERPETUAL_RED
    board = Board(fen)
    for iccs in cycle:
        board.push_iccs(iccs)
    assert set(repetition_safe_moves(board)) == set(board.legal_moves)


def _with_clock(fen: str, clock: int) -> str:
    """``fen`` with its halfmove clock (plies without a capture) set to ``clock``."""
    fields = fen.split()
    return " ".join([*fields[:3], "-", str(clock), fields[5]])


def _ends_by_repetition_against(board: Board, us: bool) -> bool:
    outcome = board.outcome()
    return (outcome is not None and outcome.winner != us
            and outcome.termination.name in ("REPETITION", "DRAW_REPETITION"))


def _rules_safe_moves(board: Board) -> set[Move]:
    """``repetition_safe_moves`` by brute force from ``Board.outcome``: a move is left out when
    the game ends on it by a repetition the mover loses or draws, or, when the game goes on, a
    reply ends it so; all moves when every one is left out."""
    us, legal, safe = board.turn, board.legal_moves, set()
    for move in legal:
        board.push(move)
        if board.outcome() is not None:
            bad = _ends_by_repetition_against(board, us)
        else:
            bad = False
            for reply in board.legal_moves:
                board.push(reply)
                bad = bad or _ends_by_repetition_against(board, us)
                board.pop()
        board.pop()
        if not bad:
            safe.add(move)
    return safe or set(legal)


def _perpetual_red_at_clock(clock: int) -> Board:
    """PERPETUAL_RED started ``clock`` plies after the last capture, six plies of it played: Red
    to move, whose a9a8 checks again and lets Black's e8e9 make the third occurrence Red loses."""
    fen, cycle = PERPETUAL_RED
    board = Board(_with_clock(fen, clock))
    for iccs in (cycle * 2)[:6]:
        board.push_iccs(iccs)
    return board


def _every_move_draws_by_the_no_capture_rule(board: Board) -> bool:
    ends = []
    for move in board.legal_moves:
        board.push(move)
        outcome = board.outcome()
        ends.append(outcome is not None and outcome.termination.name == "NO_CAPTURE_120")
        board.pop()
    return all(ends)


def test_a_move_that_draws_by_the_no_capture_rule_is_not_judged_by_replies_after_it() -> None:
    # At 119 plies without a capture Red's a9a8 is the 120th, and Board.outcome() ends the game
    # there by the no-capture draw (no black piece can be taken, so every Red move does). Black's
    # reply e8e9 is never played, yet the filter left a9a8 out for it.
    board = _perpetual_red_at_clock(113)
    assert board.halfmove_clock == 119 and board.outcome() is None
    assert _every_move_draws_by_the_no_capture_rule(board)
    assert set(repetition_safe_moves(board)) == set(board.legal_moves)
    # a ply earlier the game goes on after a9a8, and the reply's third occurrence is real
    board = _perpetual_red_at_clock(112)
    assert set(repetition_safe_moves(board)) == set(board.legal_moves) - {
        board.parse_iccs("a9a8")}


def test_the_guided_player_judges_a_move_that_draws_by_the_no_capture_rule_by_that_draw() -> None:
    # the same position for sound_moves: a9a8 reaches the second occurrence of a position of
    # Red's perpetual check, which was vetoed as a repetition, though the game ends on it by the
    # 120-ply draw as on every other move (a margin that keeps every move within it)
    from apps.xiangqi.repetition import repetition_classes

    board = _perpetual_red_at_clock(113)
    check = board.parse_iccs("a9a8")
    assert sound_moves(board, SearchConfig(depth=1), margin=1000.0) == set(board.legal_moves)
    assert repetition_classes(board, {check}) == ({check}, {check})
    board = _perpetual_red_at_clock(112)  # a ply earlier: a repetition Red loses, as before
    assert repetition_classes(board, {check}) == (set(), set())
    assert check not in sound_moves(board, SearchConfig(depth=1), margin=1000.0)


@pytest.mark.parametrize("game", [PERPETUAL_RED, PERPETUAL_RED_OWN, QUIET_CYCLE])
@pytest.mark.parametrize("clock", [100, 110, 112, 113, 114, 115, 116])
def test_the_repetition_filter_agrees_with_the_rules_one_and_two_plies_deep(
    game: tuple[str, list[str]], clock: int
) -> None:
    # every position of two rounds of the cycle, started `clock` plies after the last capture:
    # up to the 120-ply draw, where a repetition takes precedence over it
    fen, cycle = game
    board = Board(_with_clock(fen, clock))
    for iccs in cycle * 2:
        if board.outcome() is not None:
            break
        assert set(repetition_safe_moves(board)) == _rules_safe_moves(board), board.move_stack
        board.push_iccs(iccs)


def test_the_guided_player_keeps_a_mate_in_one() -> None:
    # e3d3 mates; i2i4 takes a horse and mates a move later. The search scored the slower mate
    # higher (the horse added to the mate score), so at margin 0 the mate in one was vetoed
    board = Board("3k5/9/9/9/9/8n/4R4/4K3R/9/9 w - - 0 1")
    guided = SearchGuidedPlayer(_FixedAnswers("e3d3", {"e3d3": 0.9, "i2i4": 0.05}))
    choice = guided.choose_with_info(board)
    assert choice.move.iccs() == "e3d3" and guided.overrides == 0
    board.push(choice.move)
    assert board.is_checkmate()


@pytest.mark.parametrize("margin", [-0.5, float("nan"), float("inf")])
def test_an_unusable_search_margin_is_refused(model: Any, margin: float) -> None:
    """A negative margin vetoes even the best move (``sound_moves`` was empty and the pick
    crashed on it); NaN and inf are no margins either."""
    with pytest.raises(ValueError, match="margin"):
        SearchGuidedPlayer(model, margin=margin)
    with pytest.raises(ValueError, match="margin"):
        sound_moves(Board(), SearchConfig(depth=1), margin)
    from apps.xiangqi.evaluate import main as evaluate_main

    with pytest.raises(SystemExit) as exit_info:  # argparse: usage error, status 2
        evaluate_main(["match", "--opponent", "random", "--margin", str(margin)])
    assert exit_info.value.code == 2


def test_check_player_setting(checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from apps.xiangqi.player_settings import check_player_setting

    for good in ("random", "greedy", "auto", "default", str(checkpoint)):
        check_player_setting(good)
    with pytest.raises(ValueError, match="model directory"):
        check_player_setting("/nonexistent/checkpoint")
    monkeypatch.setenv("DECISION_XIANGQI_SEARCH", "4")
    with pytest.raises(ValueError, match="DECISION_XIANGQI_SEARCH"):
        check_player_setting(str(checkpoint))
    check_player_setting("random")  # plays no search: the depth does not matter
    monkeypatch.setenv("DECISION_XIANGQI_SEARCH", "0")
    monkeypatch.setenv("DECISION_XIANGQI_POOLING", "sometimes")
    with pytest.raises(ValueError, match="DECISION_XIANGQI_POOLING"):
        check_player_setting(str(checkpoint))
    check_player_setting("greedy")
