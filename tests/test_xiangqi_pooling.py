"""apps.xiangqi.pooling: the move question asked in each image of a position, answers averaged."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.xiangqi import Board
from apps.xiangqi.agreement import SamplePosition, agreement, pooled_requests, position_key
from apps.xiangqi.core import Move
from apps.xiangqi.model_player import ModelPlayer
from apps.xiangqi.pooling import (
    POOL_FROM_PLY,
    SymmetryPooling,
    board_ply,
    image_questions,
    pooled_pick,
    pooled_probabilities,
)
from apps.xiangqi.repetition import repetition_safe_moves
from apps.xiangqi.search_guided import SearchGuidedPlayer
from apps.xiangqi.symmetry import IDENTITY, SYMMETRIES, Symmetry
from apps.xiangqi.training import example_at

MIRROR = Symmetry(mirror=True)


def _random_game(seed: int, plies: int) -> Board:
    rng = random.Random(seed)
    board = Board()
    for _ in range(plies):
        if board.outcome() is not None or len(board.legal_moves) < 2:
            break
        board.push(rng.choice(board.legal_moves))
    return board


class HashModel:
    """A stand-in model whose option probabilities are a fixed function of (document, option):
    a different document is a different view, the same document always the same answer."""

    def __init__(self) -> None:
        self.documents: list[str] = []

    def probabilities(self, document: str, options: list[str]) -> dict[str, float]:
        weights = {o: 1 + int(hashlib.sha256(f"{document}|{o}".encode()).hexdigest()[:6], 16)
                   for o in options}
        total = sum(weights.values())
        return {o: w / total for o, w in weights.items()}

    def decide(self, document: str, questions: list[Any], **kw: Any) -> Any:
        self.documents.append(document)
        options = questions[0]["answer"]["options"]
        probs = self.probabilities(document, options)
        best = max(probs, key=probs.__getitem__)
        return SimpleNamespace(answers=[SimpleNamespace(
            value=best, confidence=probs[best],
            option_probabilities=probs if kw.get("return_probabilities") else None)])


def test_the_ply_counts_from_the_move_number() -> None:
    board = Board()
    assert board_ply(board) == 0
    board.push_iccs("h2e2")
    assert board_ply(board) == 1
    board.push_iccs("h9g7")
    assert board_ply(board) == 2
    assert board_ply(Board("4k4/9/9/9/9/9/9/9/9/3K5 b - - 0 31")) == 61


def test_images_are_asked_from_the_ply_on() -> None:
    pooling = SymmetryPooling(from_ply=2)
    board = Board()
    assert pooling.images_of(board) == (IDENTITY,)
    board.push_iccs("h2e2")
    assert pooling.images_of(board) == (IDENTITY,)
    board.push_iccs("h9g7")
    assert pooling.images_of(board) == SYMMETRIES
    assert SymmetryPooling().from_ply == POOL_FROM_PLY


@pytest.mark.parametrize("bad", [
    {"from_ply": -1}, {"images": ()}, {"images": (MIRROR, IDENTITY)},
    {"images": (IDENTITY, MIRROR, MIRROR)},
])
def test_bad_poolings_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SymmetryPooling(**bad)


def test_each_image_asks_the_same_moves_in_its_own_frame() -> None:
    board = _random_game(3, 30)
    options = repetition_safe_moves(board)
    asked = image_questions(board, options, SYMMETRIES)
    assert [q.symmetry for q in asked] == list(SYMMETRIES)
    own = sorted(m.iccs() for m in options)
    for q in asked:
        image = q.symmetry.board(board)
        assert q.document.startswith(_document_head(image))
        # mapped back, every image offers exactly the position's own moves
        assert sorted(q.symmetry.iccs(o) for o in q.question["answer"]["options"]) == own
        assert all(image.is_legal(Move.from_iccs(o)) for o in q.question["answer"]["options"])
    assert asked[0].document == _document(board)


def _document(board: Board) -> str:
    from apps.xiangqi.render import position_document

    return position_document(board)


def _document_head(board: Board) -> str:
    return _document(board)[:200]


def test_pooled_probabilities_map_back_and_average() -> None:
    images = (IDENTITY, MIRROR)
    own = {"h2e2": 0.6, "b2e2": 0.4}
    mirrored = {"b2e2": 0.9, "h2e2": 0.1}  # the image's b2e2 is the position's h2e2
    pooled = pooled_probabilities(images, [own, mirrored])
    assert pooled == pytest.approx({"h2e2": 0.75, "b2e2": 0.25})
    assert pooled_pick(pooled, own) == "h2e2"
    with pytest.raises(ValueError):
        pooled_probabilities(images, [own])


def test_ties_go_to_the_positions_own_view_then_iccs() -> None:
    assert pooled_pick({"b2e2": 0.5, "h2e2": 0.5}, {"b2e2": 0.6, "h2e2": 0.4}) == "b2e2"
    assert pooled_pick({"b2e2": 0.5, "h2e2": 0.5}, {}) == "h2e2"
    with pytest.raises(ValueError):
        pooled_pick({}, {})


class _ByOption:
    """A stand-in model that answers by option text alone. At the start position, symmetric
    about the centre file, the position and its mirror image are one board and so are the two
    swapped images: any model answers them so."""

    probabilities = {"h2e2": 0.1, "b2e2": 0.05, "b7e7": 0.3, "h7e7": 0.15}

    def decide(self, document: str, questions: list[Any], **kw: Any) -> Any:
        probs = {o: self.probabilities.get(o, 0.001) for o in questions[0]["answer"]["options"]}
        best = max(probs, key=probs.__getitem__)
        return SimpleNamespace(answers=[SimpleNamespace(value=best, confidence=probs[best],
                                                        option_probabilities=probs)])


def test_a_move_and_its_mirror_in_a_symmetric_position_tie_exactly_and_go_to_the_own_view(
) -> None:
    # h2e2 and b2e2 get the terms 0.1, 0.05, 0.3 and 0.15 in two orders: a running sum gave
    # b2e2 0.15000000000000002 against h2e2's 0.15, and the pick went against the own view
    swap = Symmetry(swap=True)
    own = {"h2e2": 0.1, "b2e2": 0.05}
    swapped = {swap.iccs("h2e2"): 0.3, swap.iccs("b2e2"): 0.15}
    pooled = pooled_probabilities(SYMMETRIES, [own, own, swapped, swapped])
    assert pooled["h2e2"] == pooled["b2e2"]
    assert pooled_pick(pooled, own) == "h2e2"
    player = ModelPlayer(_ByOption(), pooling=SymmetryPooling(from_ply=0))
    assert player.choose(Board()).iccs() == "h2e2"


def test_the_player_asks_the_images_only_from_the_ply_on() -> None:
    model = HashModel()
    player = ModelPlayer(model, pooling=SymmetryPooling(from_ply=20))
    early, late = _random_game(1, 10), _random_game(2, 40)
    assert board_ply(early) < 20 <= board_ply(late)
    move = player.choose(early)
    assert len(model.documents) == 1 and model.documents[0] == _document(early)
    # the position as is: exactly the unpooled player's move
    assert move == ModelPlayer(HashModel()).choose(early)
    choice = player.choose_with_info(late)
    assert len(model.documents) == 1 + len(SYMMETRIES)
    own = HashModel().probabilities(_document(late),
                                    sorted(m.iccs() for m in repetition_safe_moves(late)))
    views = [own] + [HashModel().probabilities(q.document, q.question["answer"]["options"])
                     for q in image_questions(late, repetition_safe_moves(late), SYMMETRIES)[1:]]
    pooled = pooled_probabilities(SYMMETRIES, views)
    assert choice.move.iccs() == max(pooled, key=pooled.__getitem__)
    assert choice.confidence == pytest.approx(pooled[choice.move.iccs()])
    assert late.is_legal(choice.move)


def test_pooling_needs_the_scoring_decoder() -> None:
    with pytest.raises(ValueError, match="score"):
        ModelPlayer(HashModel(), decoder="token", pooling=SymmetryPooling())


def test_the_guided_player_falls_back_on_the_pooled_probabilities() -> None:
    board = _random_game(5, 44)
    model = HashModel()
    guided = SearchGuidedPlayer(model, pooling=SymmetryPooling(from_ply=0))
    answer, chosen = guided.own_and_guided(board)
    assert answer.probabilities is not None and len(model.documents) == len(SYMMETRIES)
    assert set(answer.probabilities) == {m.iccs() for m in repetition_safe_moves(board)}
    assert board.is_legal(chosen)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), plies=st.integers(24, 60))
def test_pooling_is_the_same_in_every_image(seed: int, plies: int) -> None:
    """Pooled over the whole symmetry group, a position and any of its images are asked the same
    four documents, so their pooled probabilities agree move for move."""
    board = _random_game(seed, plies)
    if len(board.legal_moves) < 2 or board.outcome() is not None:
        return
    pooling = SymmetryPooling(from_ply=0)
    model = HashModel()

    def pooled(b: Board) -> dict[str, float]:
        asked = image_questions(b, repetition_safe_moves(b), pooling.images)
        return pooled_probabilities(pooling.images, [
            model.probabilities(q.document, q.question["answer"]["options"]) for q in asked])

    base = pooled(board)
    for symmetry in SYMMETRIES[1:]:
        image = pooled(symmetry.board(board))
        assert {symmetry.iccs(m): p for m, p in image.items()} == pytest.approx(base)


def test_agreement_pools_as_the_player_does(tiny_checkpoint_dir: Path) -> None:
    from decision import load_model

    model = load_model(str(tiny_checkpoint_dir))
    sample = []
    for seed in range(8):
        board = _random_game(seed, 4 + 6 * seed)
        gold = board.legal_moves[0].iccs()
        sample.append(SamplePosition(example_at(board, gold), position_key(board),
                                     board_ply(board), board))
    pooling = SymmetryPooling(from_ply=20)
    result = agreement(model, sample, set(), batch_size=3, pooling=pooling)
    assert result.player == "policy, 4 images pooled from ply 20" and result.legal == len(sample)
    player = ModelPlayer(model, pooling=pooling)
    for position, row in zip(sample, result.results, strict=True):
        assert row["move"] == player.choose(position.board).iccs()
        images, requests = pooled_requests(position, pooling)
        assert len(requests) == len(images) == (4 if position.ply >= 20 else 1)


class OneByOne:
    """The model without ``decide_many``: the player then asks one image at a time."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.calls = 0

    def decide(self, *args: Any, **kw: Any) -> Any:
        self.calls += 1
        return self.model.decide(*args, **kw)


def test_the_images_asked_in_one_batch_answer_as_one_at_a_time(
    tiny_checkpoint_dir: Path,
) -> None:
    """A model with ``decide_many`` gets a pooled move's images in one batch; the pooled
    probabilities are those of asking each image alone."""
    from decision import load_model

    model = load_model(str(tiny_checkpoint_dir))
    pooling = SymmetryPooling(from_ply=0)
    for seed in (3, 4):
        board = _random_game(seed, 30)
        one_by_one = OneByOne(model)
        alone = ModelPlayer(one_by_one, pooling=pooling)._ask(board)
        batched = ModelPlayer(model, pooling=pooling)._ask(board)
        assert one_by_one.calls == len(SYMMETRIES)
        assert batched.move == alone.move
        assert batched.probabilities == pytest.approx(alone.probabilities, abs=1e-5)
