"""Teacher labels (apps/xiangqi/teacher.py) and how the training driver mixes them in.

Runs without ../shared: games come from the in-repo CCPD sample (tests/data).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.xiangqi.board import Board
from apps.xiangqi.core import Move
from apps.xiangqi.dataset import replay
from apps.xiangqi.search import SearchConfig
from apps.xiangqi.search_guided import SearchGuidedPlayer, sound_moves
from apps.xiangqi.teacher import TEACHER_CATEGORY, collect, label, main
from apps.xiangqi.train_player import load_player_config
from apps.xiangqi.training import (
    GameRecord,
    MoveRowSource,
    PositionRef,
    last_ply_positions,
    load_games,
    mixed_positions,
)
from decision.errors import DecisionInputError

SAMPLE = Path(__file__).resolve().parent / "data" / "xiangqi-games-sample.jsonl.gz"


@pytest.fixture(scope="module")
def games() -> list[GameRecord]:
    return load_games(SAMPLE, limit=30)


@pytest.fixture(scope="module")
def teacher(tiny_checkpoint_dir: Path) -> SearchGuidedPlayer:
    """The session's random-weight tiny model (its byte-level tokenizer spells any position)."""
    from decision import load_model

    return SearchGuidedPlayer(load_model(str(tiny_checkpoint_dir)), "teacher",
                              search=SearchConfig(depth=1))


def test_the_teacher_move_is_sound_and_the_student_move_kept_when_sound(
    teacher: SearchGuidedPlayer,
) -> None:
    board = Board("4k4/9/9/9/9/4r4/9/9/4R4/3K5 w - - 0 1")  # Red's chariot can take Black's
    own, taught = label(teacher, board)
    sound = sound_moves(board, teacher.search, teacher.margin)
    assert board.is_legal(own) and taught in sound
    assert taught == Move.from_iccs("e1e4")  # the free chariot: the only move within margin 0
    assert (own == taught) == (own in sound)


def test_collected_records_replay_and_end_with_the_teacher_move(
    teacher: SearchGuidedPlayer,
) -> None:
    games = list(collect(teacher, games=2, seed=90_000, max_plies=12))
    assert len(games) == 2
    for g, records in enumerate(games):
        assert records, "the student had positions to label"
        for record in records:
            board = replay(record)  # every move legal, the teacher's last
            assert record["category"] == TEACHER_CATEGORY
            assert board.turn == (g % 2 == 1)  # the student's colour moved last: Red in game 0
            board.pop()
            student = Move.from_iccs(record["student"])
            assert board.is_legal(student)
        # the game goes on with the student's move: the next record's history holds it
        for before, after in zip(records, records[1:], strict=False):
            ply = len(before["moves"]) - 1
            assert after["moves"][ply] == before["student"]


def test_collect_is_deterministic_and_stops_at_the_deadline(
    teacher: SearchGuidedPlayer,
) -> None:
    first = list(collect(teacher, games=1, seed=5, max_plies=8))
    again = list(collect(teacher, games=1, seed=5, max_plies=8))
    assert first == again
    assert list(collect(teacher, games=3, seed=5, max_plies=8, deadline=0.0)) == []


def test_teacher_cli_writes_a_games_file_the_driver_reads(
    teacher: SearchGuidedPlayer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import decision

    monkeypatch.setattr(decision, "load_model", lambda path: teacher.model)
    out = tmp_path / "labels.jsonl.gz"
    argv = ["--games", "2", "--seed", "90000", "--max-plies", "6", "--search-depth", "1",
            "--out", str(out)]
    assert main(argv) == 0
    records = load_games(out)
    assert records and all(r.category == TEACHER_CATEGORY for r in records)
    with pytest.raises(SystemExit):  # never appends to an earlier run's file
        main(argv)


def test_last_ply_positions_and_the_mix_are_deterministic() -> None:
    taught = [GameRecord("fen", ("a", "b", "c"), "teacher"), GameRecord("fen", ("a",), "teacher")]
    refs = last_ply_positions(taught, offset=10, count=50, seed=3)
    assert refs == last_ply_positions(taught, offset=10, count=50, seed=3)
    assert {(r.game, r.ply) for r in refs} == {(10, 2), (11, 0)}
    assert last_ply_positions(taught, 0, 0, seed=3) == []
    master = [PositionRef(0, i) for i in range(20)]
    mixed = mixed_positions(master, refs, seed=4)
    assert mixed == mixed_positions(master, refs, seed=4)
    assert sorted(mixed, key=lambda r: (r.game, r.ply)) == sorted(master + refs,
                                                                  key=lambda r: (r.game, r.ply))
    with pytest.raises(DecisionInputError):
        last_ply_positions([], 0, 5, seed=1)


def test_a_teacher_position_trains_on_the_teacher_move(
    teacher: SearchGuidedPlayer, games: list[GameRecord],
) -> None:
    records = next(collect(teacher, games=1, seed=90_000, max_plies=10))
    taught = [GameRecord(r["start_fen"], tuple(r["moves"]), r["category"]) for r in records]
    refs = last_ply_positions(taught, len(games), 5, seed=1)
    source = MoveRowSource(games + taught, refs, teacher.model.tokenizer)
    for i, ref in enumerate(refs):
        assert source.example(i).gold == taught[ref.game - len(games)].moves[-1]


@pytest.mark.parametrize(
    ("xiangqi", "words"),
    [({"teacher_share": 1.5}, "teacher_share must be in [0, 1]"),
     ({"teacher_share": 0.5}, "needs xiangqi.teacher_games")],
)
def test_teacher_settings_are_checked(tmp_path: Path, xiangqi: dict, words: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"xiangqi": xiangqi}))
    with pytest.raises(DecisionInputError, match=words.replace("[", r"\[").replace("]", r"\]")):
        load_player_config(path)
    path.write_text(json.dumps({"xiangqi": {**xiangqi, "teacher_share": 0.5,
                                            "teacher_games": "labels.jsonl.gz"}}))
    assert load_player_config(path)[1].teacher_games == "labels.jsonl.gz"
