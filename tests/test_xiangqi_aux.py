"""Auxiliary questions in the Xiangqi rows: a second question in the move's joint group."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from apps.xiangqi.book import MoveBook
from apps.xiangqi.fen import STARTING_FEN
from apps.xiangqi.symmetry import Symmetry
from apps.xiangqi.train_player import load_player_config
from apps.xiangqi.training import (
    RESULT_ANSWERS,
    GameRecord,
    MoveRowSource,
    PositionRef,
    aux_question,
    board_at,
    load_games,
    tokenizer_corpus,
)
from decision.errors import DecisionInputError
from decision.joint.scoring import SlotOptions
from decision.model.testing import tiny_model
from decision.tokenizer import special_ids, train_tokenizer
from decision.train.config import config_from_dict
from decision.train.option_loss import option_loss
from decision.train.rows import Row, collate
from decision.train.step_loss import batch_loss, only_scored_slots

VALID = Path(__file__).resolve().parents[2] / "shared" / "data" / "xiangqi" / "valid-games.jsonl.gz"
needs_games = pytest.mark.skipif(not VALID.is_file(), reason=f"no game data at {VALID}")
MASK = 0


@pytest.fixture(scope="module")
def games() -> list[GameRecord]:
    return load_games(VALID, limit=30) if VALID.is_file() else []


@pytest.fixture(scope="module")
def tokenizer(games: list[GameRecord]) -> Any:
    return train_tokenizer(list(tokenizer_corpus(games, 30, seed=1)), vocab_size=420)


def refs_of(games: list[GameRecord]) -> list[PositionRef]:
    """Every 7th position with a choice (row i then shows refs[i]: none is skipped)."""
    return [PositionRef(g, ply) for g, game in enumerate(games)
            for ply in range(0, len(game.moves), 7)
            if len(board_at(game, ply).legal_moves) > 1]


def decoded(tokenizer: Any, ids: list[int]) -> str:
    text = tokenizer.decode(ids, skip_special_tokens=True)
    return text.replace(" ", "")


@needs_games
def test_games_carry_their_result(games: list[GameRecord]) -> None:
    assert {g.result for g in games} <= {*RESULT_ANSWERS, "*", ""}
    assert any(g.result in RESULT_ANSWERS for g in games)


@needs_games
@pytest.mark.parametrize("mirror_share", [0.0, 1.0])
def test_reply_rows_add_the_next_move_and_keep_the_move_slot(
        games: list[GameRecord], tokenizer: Any, mirror_share: float) -> None:
    refs = refs_of(games)
    plain = MoveRowSource(games, refs, tokenizer, mirror_share)
    aux = MoveRowSource(games, refs, tokenizer, mirror_share, aux="reply", aux_share=1.0)
    special = special_ids(tokenizer)
    asked = 0
    for i in range(len(refs)):
        ref, row, base = refs[i], aux.row(i), plain.row(i)
        game = games[ref.game]
        if len(row.roles) == 1:  # only the last move of a game has no reply
            assert row.block_ids == base.block_ids
            assert ref.ply + 1 == len(game.moves) or plain.example(i).gold != game.moves[ref.ply]
            continue
        asked += 1
        # the move's slot is where, and what, it is without the extra question
        length = len(base.options[0])
        start = base.options_start
        assert row.options_start == start and row.options == base.options
        assert row.block_ids[: start + length] == base.block_ids[: start + length]
        assert row.history_ids[: len(base.history_ids)] == base.history_ids
        assert row.kind == "joint" and row.roles == [0, 0]
        # the second slot holds the opponent's reply in the game (mirrored with the position)
        second = [b for b, s in zip(row.block_ids, row.slot_of, strict=True) if s == 1]
        reply = game.moves[ref.ply + 1]
        want = Symmetry(mirror=True).iccs(reply) if mirror_share else reply
        assert decoded(tokenizer, [t for t in second if t != special.eos]) == want
    assert asked > len(refs) // 2


@needs_games
def test_result_rows_name_the_winner_and_skip_unknown_results(
        games: list[GameRecord], tokenizer: Any) -> None:
    unknown = GameRecord(games[0].start_fen, games[0].moves, games[0].category, "*")
    mixed = [*games, unknown]
    refs = [*refs_of(games), PositionRef(len(games), 2)]
    source = MoveRowSource(mixed, refs, tokenizer, aux="result", aux_share=1.0)
    for i, ref in enumerate(refs):
        row = source.row(i)
        answer = RESULT_ANSWERS.get(mixed[ref.game].result)
        assert (len(row.roles) == 2) == (answer is not None)
        if answer is not None:
            second = [b for b, s in zip(row.block_ids, row.slot_of, strict=True) if s == 1]
            assert decoded(tokenizer, second) == answer


@needs_games
def test_the_share_is_deterministic_and_book_targets_get_no_reply(
        games: list[GameRecord], tokenizer: Any) -> None:
    refs = refs_of(games)
    half = MoveRowSource(games, refs, tokenizer, seed=4, aux="reply", aux_share=0.5)
    flags = [half.with_aux(i) for i in range(len(refs))]
    assert 0 < sum(flags) < len(refs)
    again = MoveRowSource(games, refs, tokenizer, seed=4, aux="reply", aux_share=0.5)
    assert flags == [again.with_aux(i) for i in range(len(refs))]
    assert not any(MoveRowSource(games, refs, tokenizer).with_aux(i) for i in range(len(refs)))
    # a row whose target is the book's move, not the one played, has no reply to ask about
    opening = [PositionRef(g, 0) for g in range(len(games))]
    book = MoveBook.from_games((g.start_fen, g.moves) for g in games)
    booked = MoveRowSource(games, opening, tokenizer, book=book, book_min_count=1,
                           aux="reply", aux_share=1.0)
    for i, ref in enumerate(opening):
        target = booked.example(i).gold
        assert (len(booked.row(i).roles) == 2) == (target == games[ref.game].moves[0])


@needs_games
def test_bad_settings_are_refused(games: list[GameRecord], tokenizer: Any,
                                  tmp_path: Path) -> None:
    refs = refs_of(games)
    with pytest.raises(DecisionInputError, match="aux"):
        MoveRowSource(games, refs, tokenizer, aux="", aux_share=0.5)
    with pytest.raises(DecisionInputError, match="aux"):
        MoveRowSource(games, refs, tokenizer, aux="material", aux_share=0.5)
    for section in ({"aux_share": 0.5}, {"aux": "reply", "aux_share": 1.5}):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({"train": {"data": {"task": "xiangqi"}},
                                    "xiangqi": section}))
        with pytest.raises(DecisionInputError, match="xiangqi.aux"):
            load_player_config(path)


def test_option_losses_read_only_the_scored_slot() -> None:
    slot_of = torch.tensor([[-1, 0, 0, -1, 1, 1], [-1, 0, 0, -1, -1, -1]])
    blocks = torch.tensor([[9, 1, 2, 8, 3, 4], [9, 2, 1, 5, 6, 7]])
    options = ((1, 2), (2, 1))
    slots = [SlotOptions(0, 1, options), SlotOptions(1, 1, options)]
    read = only_scored_slots(blocks, slot_of, slots, MASK)
    assert read.tolist() == [[9, 1, 2, 8, MASK, MASK], [9, 2, 1, 5, 6, 7]]
    assert blocks[0, 4] == 3  # the batch's own blocks are left as they were


@pytest.mark.parametrize("aux_answer", [(3, 4), (4, 3), (6, 6)])
def test_the_auxiliary_answer_does_not_reach_the_option_loss(
        aux_answer: tuple[int, int]) -> None:
    model = tiny_model(seed=0, random_block=True)
    options = ((1, 2, 3), (1, 3, 2), (4, 2, 3))
    row = Row(history_ids=[5, 6, 7], history_segments=[0, 1, 2],
              block_ids=[9, *options[1], 10, *aux_answer], block_segments=[1] * 4 + [2] * 3,
              slot_of=[-1, 0, 0, 0, -1, 1, 1], roles=[0, 0], kind="joint", options=options,
              options_start=1)
    batch = collate([row], pad_token_id=11)
    cfg = config_from_dict({"data": {"option_loss_weight": 1.0}})
    with torch.no_grad():
        read = only_scored_slots(batch.block_ids, batch.slot_of, batch.scored_slots, MASK)

        def forward(ids: torch.Tensor) -> torch.Tensor:
            return model(batch.history_ids, ids, history_mask=batch.history_mask,
                         block_mask=batch.block_mask, history_segments=batch.history_segments,
                         block_segments=batch.block_segments)

        expected = option_loss(forward, read, batch.scored_slots, MASK)
        masked_aux = row.block_ids[:4] + [10, MASK, MASK]
        blind = option_loss(forward, torch.tensor([masked_aux]), batch.scored_slots, MASK)
        assert float(expected) == pytest.approx(float(blind), rel=1e-6)
        without = config_from_dict({"data": {"option_loss_weight": 0.0}})
        gen = torch.Generator
        added = batch_loss(model, batch, cfg, MASK, gen().manual_seed(1)) - batch_loss(
            model, batch, without, MASK, gen().manual_seed(1))
        assert float(added) == pytest.approx(float(expected), rel=1e-4)


def test_auxiliary_answers_follow_the_image_the_row_shows() -> None:
    game = GameRecord(STARTING_FEN, ("h2e2", "h9g7", "h0g2"), "對局", "1-0")
    board = board_at(game, 0)
    swap, both = Symmetry(swap=True), Symmetry(mirror=True, swap=True)
    # the colours change places: Red's game is Black's in the swapped image, and so its win
    assert aux_question("result", game, 0, "h2e2", board, swap) == ("Who won this game?", "black")
    assert aux_question("result", game, 0, "h2e2", board) == ("Who won this game?", "red")
    drawn = GameRecord(None, game.moves, game.category, "1/2-1/2")
    assert aux_question("result", drawn, 0, "h2e2", board, swap)[1] == "draw"
    # the reply is the opponent's move in the image, asked of the image's opponent
    assert aux_question("reply", game, 0, "h2e2", board, both) == (
        "Which reply did red play?", both.iccs("h9g7"))
    assert aux_question("reply", game, 0, "h2e2", board) == ("Which reply did black play?", "h9g7")
