"""Symmetry pooling: the move question asked in each image of the position, the answers averaged.

The rules do not change when the board is mirrored or turned round with the colours swapped
(:mod:`apps.xiangqi.symmetry`), so each image asks the same question: a move there maps back to a
move here, with the same worth. The model reads each image as a fresh position, and its errors
in different images are partly independent, so the mean of its option probabilities over the
images ranks the moves better than one image does (test-time augmentation, as board-game
networks average over the board's symmetries).

Not in the opening: the model has learned the masters' one-sided opening habits (the central
cannon from the right-hand file) more than the board, so there an image is much the weaker view
and pooling dilutes the position's own answer. Before ply ``from_ply`` (default 20, the
"opening" of every agreement table) the position is asked as is. Measured in
docs/xiangqi-model.md ("Symmetry pooling").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from apps.xiangqi.board import Board
from apps.xiangqi.core import BLACK, Move
from apps.xiangqi.symmetry import IDENTITY, SYMMETRIES, Symmetry

# Positions before this ply are asked as is (module docstring); on the 2,000 tuning positions
# of seed 7 any start from ply 16 to 30 gave most of the gain, 20 is the tables' opening.
POOL_FROM_PLY = 20


def board_ply(board: Board) -> int:
    """Plies played before ``board`` by its move number (0 at the start position)."""
    return 2 * (board.fullmove_number - 1) + (board.turn == BLACK)


@dataclass(frozen=True)
class SymmetryPooling:
    """Which images of a position the move question is asked in, from which ply."""

    from_ply: int = POOL_FROM_PLY
    images: tuple[Symmetry, ...] = SYMMETRIES

    def __post_init__(self) -> None:
        if self.from_ply < 0:
            raise ValueError(f"from_ply must be >= 0, got {self.from_ply}")
        if not self.images or self.images[0] != IDENTITY:
            raise ValueError("the images must start with the position itself (IDENTITY)")
        if len(set(self.images)) != len(self.images):
            raise ValueError("each image may be asked once")

    def images_of(self, board: Board) -> tuple[Symmetry, ...]:
        """The images to ask for ``board``: all of them from ``from_ply`` on, else the board."""
        return self.images if board_ply(board) >= self.from_ply else (IDENTITY,)


@dataclass(frozen=True)
class ImageQuestion:
    """The move question of one image: its document and question, and the map back."""

    symmetry: Symmetry
    document: str
    question: dict[str, Any]


def image_questions(board: Board, options: Sequence[Move],
                    images: Sequence[Symmetry]) -> list[ImageQuestion]:
    """The player's question (``options`` the moves it may answer) in each of ``images``."""
    from apps.xiangqi.render import move_question, position_document

    out = []
    for symmetry in images:
        image = board if symmetry == IDENTITY else symmetry.board(board)
        out.append(ImageQuestion(symmetry, position_document(image),
                                 move_question(image, [symmetry.move(m) for m in options])))
    return out


def pooled_probabilities(images: Sequence[Symmetry],
                         probabilities: Sequence[dict[str, float]]) -> dict[str, float]:
    """The mean over the images of each option's probability, in the position's own ICCS.

    Each image's options are the images of the same moves, so every move gets one term from
    each image (an option an image does not score counts 0 there). The terms are summed
    exactly rounded (``math.fsum``), so the order the images come in cannot matter: in a position
    symmetric about the centre file a move and its mirror image get the same terms in another
    order, and must tie exactly for :func:`pooled_pick` to hand the tie to the own view (a
    running sum broke about one such tie in ten by its last bit)."""
    if len(images) != len(probabilities) or not images:
        raise ValueError("one probability map per image is needed")
    terms: dict[str, list[float]] = {}
    for symmetry, image_probs in zip(images, probabilities, strict=True):
        for move, p in image_probs.items():
            terms.setdefault(symmetry.iccs(move), []).append(p)
    return {move: math.fsum(ps) / len(images) for move, ps in terms.items()}


def pooled_pick(pooled: dict[str, float], own: dict[str, float]) -> str:
    """The move of highest pooled probability; ties (a position symmetric about the centre
    file scores a move and its mirror image alike) go to the position's own view, then to
    ICCS order, so the pick is deterministic."""
    if not pooled:
        raise ValueError("no option to pick from")
    return max(pooled, key=lambda m: (pooled[m], own.get(m, 0.0), m))
