"""Distillation's soft targets (apps/xiangqi/distil.py): the teacher's pooled probabilities,
written per training row, read back onto the same rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_xiangqi_pooling import HashModel, _random_game

from apps.xiangqi.distil import label_rows, main, most_probable, teacher_probabilities
from apps.xiangqi.model_player import ModelPlayer
from apps.xiangqi.pooling import SymmetryPooling, board_ply
from apps.xiangqi.repetition import repetition_safe_moves
from apps.xiangqi.train_player import load_player_config, row_source
from apps.xiangqi.training import (
    MoveRowSource,
    SoftTarget,
    load_games,
    load_soft_targets,
    sample_positions,
)
from decision.errors import DecisionInputError
from decision.tokenizer import train_tokenizer

VALID = Path(__file__).resolve().parents[2] / "shared" / "data" / "xiangqi" / "valid-games.jsonl.gz"
needs_games = pytest.mark.skipif(not VALID.is_file(), reason=f"no game data at {VALID}")


def test_the_teacher_gives_the_pooled_players_probabilities() -> None:
    """Several boards in one call, each pooled from ply 20 as the model alone plays: the
    probabilities the pooled player ranks its move by, over every legal move."""
    model = HashModel()
    pooling = SymmetryPooling(from_ply=20)
    boards = [_random_game(seed, plies) for seed, plies in [(1, 6), (2, 26), (3, 40)]]
    assert [board_ply(b) >= 20 for b in boards] == [False, True, True]
    got = teacher_probabilities(model, boards, pooling)
    assert len(model.documents) == 1 + 4 + 4
    player = ModelPlayer(HashModel(), pooling=pooling)
    for board, probs in zip(boards, got, strict=True):
        assert set(repetition_safe_moves(board)) == set(board.legal_moves)
        assert set(probs) == {m.iccs() for m in board.legal_moves}
        assert sum(probs.values()) == pytest.approx(1.0)
        assert probs == pytest.approx(player._ask(board, return_probabilities=True).probabilities)


def test_most_probable_keeps_the_top_moves_until_the_mass() -> None:
    probs = {"a": 0.5, "b": 0.3, "c": 0.15, "d": 0.05}
    assert most_probable(probs, top=8, mass=0.95) == {"a": 0.5, "b": 0.3, "c": 0.15}
    assert most_probable(probs, top=2, mass=0.95) == {"a": 0.5, "b": 0.3}
    assert most_probable(probs, top=8, mass=0.5) == {"a": 0.5}
    assert most_probable({"x": 0.2, "w": 0.2}, top=1) == {"w": 0.2}  # ties by name


def test_soft_target_files_are_read_and_checked(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text('{"row": 3, "fen": "F", "targets": {"h2e2": 0.6, "b2e2": 0.4}}\n\n')
    assert load_soft_targets(good) == {3: SoftTarget("F", {"h2e2": 0.6, "b2e2": 0.4})}
    for text, words in [
        ("not json\n", "not a soft-target record"),
        ('{"row": 1, "targets": {"a": 1}}\n', "not a soft-target record"),
        ('{"row": 1, "fen": "F", "targets": {"a": -1, "b": 2}}\n', "non-negative"),
        ('{"row": 1, "fen": "F", "targets": {}}\n', "non-negative"),
        ('{"row": 1, "fen": "F", "targets": {"a": 1}}\n' * 2, "new index"),
    ]:
        bad = tmp_path / "bad.jsonl"
        bad.write_text(text)
        with pytest.raises(DecisionInputError, match=words):
            load_soft_targets(bad)
    with pytest.raises(DecisionInputError, match="cannot read soft targets"):
        load_soft_targets(tmp_path / "missing.jsonl")


def test_soft_target_files_refuse_non_finite_probabilities(tmp_path: Path) -> None:
    """A teacher that gave NaN writes it as JSON's NaN (``most_probable`` keeps it): the file
    is refused when read, not accepted to make the run's loss NaN rows later."""
    written = json.dumps({"row": 0, "fen": "F",
                          "targets": most_probable({"h2e2": float("nan"), "b2e2": 0.4})})
    for text in (written, '{"row": 0, "fen": "F", "targets": {"h2e2": Infinity}}'):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(text + "\n")
        with pytest.raises(DecisionInputError, match="finite"):
            load_soft_targets(bad)


@pytest.fixture(scope="module")
def games() -> list[Any]:
    if not VALID.is_file():
        pytest.skip(f"no game data at {VALID}")
    return load_games(VALID, limit=20)


@needs_games
def test_rows_carry_their_soft_targets_and_refuse_another_positions(games: list[Any]) -> None:
    from apps.xiangqi.training import tokenizer_corpus

    tokenizer = train_tokenizer(list(tokenizer_corpus(games, 20, seed=1)), vocab_size=420)
    refs = sample_positions(games, 10, seed=2)
    plain = MoveRowSource(games, refs, tokenizer)
    board = plain.position(4)[0]
    moves = [m.iccs() for m in board.legal_moves]
    soft = {4: SoftTarget(board.fen(), {moves[2]: 0.7, moves[0]: 0.3})}
    taught = MoveRowSource(games, refs, tokenizer, soft_targets=soft)
    row = taught.row(4)
    options = plain.example(4).question["answer"]["options"]
    assert [(options[i], q) for i, q in row.soft_targets] == [(moves[2], 0.7), (moves[0], 0.3)]
    assert taught.row(3).soft_targets == () and plain.row(4).soft_targets == ()
    assert taught.row(4).block_ids == plain.row(4).block_ids  # the targets change nothing else
    wrong = MoveRowSource(games, refs, tokenizer,
                          soft_targets={3: SoftTarget(board.fen(), {moves[0]: 1.0})})
    with pytest.raises(DecisionInputError, match="made for another config"):
        wrong.row(3)
    unknown = MoveRowSource(games, refs, tokenizer,
                            soft_targets={4: SoftTarget(board.fen(), {"a0a9": 1.0})})
    with pytest.raises(DecisionInputError, match="not options"):
        unknown.row(4)


@needs_games
def test_labelled_rows_are_the_runs_rows(tmp_path: Path, tiny_checkpoint_dir: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The labeller asks the rows the training run will feed, by index; the run's rows then
    carry the targets (their FEN checked), the others none."""
    from decision import load_model

    config = tmp_path / "run.json"
    config.write_text(json.dumps({"xiangqi": {"train_games": str(VALID), "valid_games":
                                              str(VALID), "train_positions": 50, "seed": 5}}))
    out = tmp_path / "targets.jsonl"
    assert label_rows(config, tiny_checkpoint_dir, 2, 7, out, top=3, batch=2) == 5
    targets = load_soft_targets(out)
    assert sorted(targets) == [2, 3, 4, 5, 6]
    assert all(1 <= len(t.probs) <= 3 for t in targets.values())
    _, xq = load_player_config(config)
    model = load_model(str(tiny_checkpoint_dir))
    source = row_source(xq, load_games(VALID), model.tokenizer, targets)
    for i in range(2, 7):
        board = source.position(i)[0]
        assert targets[i].fen == board.fen()
        want = teacher_probabilities(model, [board], SymmetryPooling())[0]
        assert targets[i].probs == most_probable(want, top=3)
        assert len(source.row(i).soft_targets) == len(targets[i].probs)
    assert source.row(7).soft_targets == ()
    # the run's own config (naming the file being made) labels the same rows
    config.write_text(json.dumps({"xiangqi": {**json.loads(config.read_text())["xiangqi"],
                                              "soft_targets": str(tmp_path / "later.jsonl")},
                                  "train": {"data": {"soft_option_loss_weight": 1.0}}}))
    again = tmp_path / "again.jsonl"
    assert main(["--config", str(config), "--model", str(tiny_checkpoint_dir),
                 "--rows", "2:4", "--batch", "1", "--top", "3", "--out", str(again)]) == 0
    assert load_soft_targets(again) == {i: targets[i] for i in (2, 3)}
    # the command line: bad rows in one line
    assert main(["--config", str(config), "--model", str(tiny_checkpoint_dir),
                 "--rows", "5:5", "--out", str(out)]) == 2
    assert "0 <= START < END" in capsys.readouterr().err


def test_soft_targets_need_the_losss_weight(tmp_path: Path) -> None:
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"xiangqi": {"soft_targets": "t.jsonl"}}))
    with pytest.raises(DecisionInputError, match="needs data.soft_option_loss_weight > 0"):
        load_player_config(config)
