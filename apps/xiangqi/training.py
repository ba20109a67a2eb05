"""Positions of recorded games -> decision-model training rows (the Xiangqi player's data).

A training example is exactly what :class:`apps.xiangqi.model_player.ModelPlayer` asks at play
time: the document ``position_document(board)``, the question ``move_question(board)`` (a
``choice`` among the legal moves) and, as gold, the move the master played. It is laid out with
the decoder's own :func:`decision.joint.layout.build_layout` (one question, one slot whose budget
is the engine's: the longest option in tokens), so training and decoding see the same tokens,
the same segment ids (question and slot share segment 1: the slot is tied to its question) and
the same slot length.

Positions are referenced by ``(game index, ply)`` and rendered lazily by replaying the game: a
training run touches ~10^5 positions out of 2.2M, and replaying costs ~40 us a ply.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from apps.xiangqi.board import Board
from apps.xiangqi.book import MoveBook
from apps.xiangqi.core import COLOR_NAMES, Move
from apps.xiangqi.dataset import iter_games, start_board
from apps.xiangqi.pooling import board_ply
from apps.xiangqi.render import move_question, position_document
from apps.xiangqi.search import SearchConfig
from apps.xiangqi.search_guided import sound_moves
from apps.xiangqi.symmetry import IDENTITY, SYMMETRIES, Symmetry
from decision.errors import DecisionInputError
from decision.joint.layout import build_layout
from decision.schemas.compile import tokenizer_context
from decision.tokenizer import SpecialIds, special_ids
from decision.train.masking import ROLE_PLAIN
from decision.train.rows import KIND_JOINT, KIND_STANDALONE, Row

FULL_GAME_CATEGORY = "對局"  # "game record": complete games; the rest are fragments/exercises
MIRROR = Symmetry(mirror=True)


@dataclass(frozen=True)
class GameRecord:
    """The parts of a recorded game that training needs."""

    start_fen: str
    moves: tuple[str, ...]
    category: str
    result: str = ""  # "1-0", "0-1", "1/2-1/2"; anything else (or "") is unknown

    @property
    def is_full_game(self) -> bool:
        return self.category == FULL_GAME_CATEGORY


@dataclass(frozen=True)
class PositionRef:
    """The position before move ``ply`` (0-based) of game ``game``."""

    game: int
    ply: int


@dataclass(frozen=True)
class MoveExample:
    """One decision: the rendered position, the move question and the master's move."""

    document: str
    question: dict[str, Any]
    gold: str


@dataclass(frozen=True)
class SoftTarget:
    """A row's soft targets (:mod:`apps.xiangqi.distil`): move -> probability, and the FEN of
    the position they were made for (a row that shows another position refuses them)."""

    fen: str
    probs: dict[str, float]


def load_soft_targets(path: str | Path) -> dict[int, SoftTarget]:
    """Read a soft-target file (JSON lines ``{"row", "fen", "targets"}``, apps/xiangqi/distil.py)
    into row index -> :class:`SoftTarget`; one clear error for a missing or malformed file."""
    out: dict[int, SoftTarget] = {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DecisionInputError(f"cannot read soft targets {path}: {exc}",
                                 "soft_targets") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            row, fen, targets = int(record["row"]), str(record["fen"]), record["targets"]
            probs = {str(move): float(q) for move, q in targets.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DecisionInputError(f"{path}:{n}: not a soft-target record ({exc})",
                                     "soft_targets") from None
        if row < 0 or not probs or not all(math.isfinite(q) and q >= 0 for q in probs.values()) \
                or sum(probs.values()) <= 0 or row in out:
            raise DecisionInputError(
                f"{path}:{n}: row {row} needs a new index >= 0 and finite, non-negative "
                "probabilities with a positive sum", "soft_targets")
        out[row] = SoftTarget(fen, probs)
    return out


def load_games(path: str | Path, limit: int | None = None) -> list[GameRecord]:
    """Read a ``*-games.jsonl.gz`` file (all categories) into memory; a file that is missing or
    not gzip is a DecisionInputError (one line on the command line, not a traceback)."""
    games: list[GameRecord] = []
    try:
        for record in iter_games(path):
            games.append(
                GameRecord(record["start_fen"], tuple(record["moves"]), record["category"],
                           str(record.get("result") or ""))
            )
            if limit is not None and len(games) >= limit:
                break
    except OSError as exc:  # FileNotFoundError, gzip.BadGzipFile, ...
        raise DecisionInputError(f"cannot read games file {path}: {exc}", "games") from None
    return games


def iter_positions(game: GameRecord) -> Iterator[tuple[Board, str]]:
    """Each position of a game (board with its move history) and the move played from it.

    The same board object is yielded and then advanced: copy it to keep it.
    """
    board, _ = start_board(game.start_fen)
    for move in game.moves:
        yield board, move
        board.push(Move.from_iccs(move))


def board_at(game: GameRecord, ply: int) -> Board:
    """The board before move ``ply``, with the game's earlier moves on its stack."""
    if not 0 <= ply < len(game.moves):
        raise DecisionInputError(f"ply {ply} outside the game's {len(game.moves)} moves", "ply")
    board, _ = start_board(game.start_fen)
    for move in game.moves[:ply]:
        board.push(Move.from_iccs(move))
    return board


def example_at(board: Board, gold: str) -> MoveExample:
    """The example ModelPlayer would face on ``board``, with ``gold`` checked among the options."""
    question = move_question(board)
    if gold not in question["answer"]["options"]:
        raise DecisionInputError(f"gold move {gold!r} is not legal in {board.fen()}", "gold")
    return MoveExample(position_document(board), question, gold)


def sample_positions(
    games: Sequence[GameRecord],
    count: int,
    seed: int,
    fragment_weight: float = 1.0,
    max_ply: int | None = None,
) -> list[PositionRef]:
    """``count`` positions drawn (with replacement) over every ply of every game, or over the
    plies before ``max_ply`` only (the openings).

    Each ply of a full game has weight 1 and each ply of a fragment (opening, middlegame, endgame,
    tactics collections) ``fragment_weight``; draws are deterministic in ``seed``.
    """
    if count < 1 or not games:
        raise DecisionInputError("need at least one game and count >= 1", "count")
    if max_ply is not None and max_ply < 1:
        raise DecisionInputError("max_ply must be >= 1", "max_ply")
    limit = len if max_ply is None else (lambda moves: min(len(moves), max_ply))
    refs = [(g, limit(game.moves)) for g, game in enumerate(games) if game.moves]
    weights = [n * (1.0 if games[g].is_full_game else fragment_weight) for g, n in refs]
    if not sum(weights) > 0:  # only fragments at weight 0 (or no moves): nothing to draw
        raise DecisionInputError(
            f"no ply to draw: no game has moves, or all that do are fragments and "
            f"fragment_weight is {fragment_weight}", "fragment_weight")
    rng = random.Random(seed)
    chosen = rng.choices(range(len(refs)), weights=weights, k=count)
    return [PositionRef(refs[i][0], rng.randrange(refs[i][1])) for i in chosen]


def last_ply_positions(
    games: Sequence[GameRecord], offset: int, count: int, seed: int
) -> list[PositionRef]:
    """``count`` draws (with replacement, deterministic in ``seed``) of the last ply of each game,
    numbered from ``offset``: a teacher file's records (``apps/xiangqi/teacher.py``) end with the
    labelled move."""
    if count < 0 or (count > 0 and not games):
        raise DecisionInputError("need teacher records to draw teacher positions", "teacher_games")
    rng = random.Random(seed)
    usable = [g for g, game in enumerate(games) if game.moves]
    return [PositionRef(offset + g, len(games[g].moves) - 1)
            for g in rng.choices(usable, k=count)] if count else []


def book_positions(
    games: Sequence[GameRecord], book: MoveBook, min_count: int, count: int, seed: int
) -> list[PositionRef]:
    """``count`` draws (with replacement, deterministic in ``seed``), uniform over the distinct
    positions that ``games`` reach at least ``min_count`` times, each at its first occurrence.

    ``book`` must be :meth:`MoveBook.from_games` of these ``games`` in this order. Drawing
    positions rather than plies gives a position seen 5 times as many draws as one seen 500
    times, where drawing plies gives it a hundredth of them (``xiangqi.drill_share``).
    """
    firsts = book.first_occurrences(min_count)
    if count < 0 or (count > 0 and len(firsts) == 0):
        raise DecisionInputError(
            f"no position is reached {min_count} times or more to draw from", "drill_min_count")
    lengths = np.array([len(g.moves) for g in games], dtype=np.int64)
    ends = np.cumsum(lengths)
    rng = random.Random(seed)
    refs = []
    for i in rng.choices(range(len(firsts)), k=count):
        flat = int(firsts[i])
        g = int(np.searchsorted(ends, flat, side="right"))
        refs.append(PositionRef(g, flat - int(ends[g] - lengths[g])))
    return refs


def mixed_positions(
    first: list[PositionRef], second: list[PositionRef], seed: int
) -> list[PositionRef]:
    """Two lists of positions (master and teacher ones, all plies and openings) interleaved in
    one deterministic shuffle."""
    refs = first + second
    random.Random(seed).shuffle(refs)
    return refs


def book_target(book: MoveBook, board: Board, played: str, min_count: int) -> str:
    """The move a row asks for under book targets: the book's most frequent move on ``board``
    when the games reached it at least ``min_count`` times, else the ``played`` move."""
    entry = book.most_common(board.zobrist_hash())
    return played if entry is None or entry.total < min_count else entry.move


AUX_KINDS = ("reply", "result")
RESULT_ANSWERS = {"1-0": "red", "0-1": "black", "1/2-1/2": "draw"}
SWAPPED_RESULT = {"red": "black", "black": "red"}


def aux_question(kind: str, game: GameRecord, ply: int, target: str, board: Board,
                 image: Symmetry = IDENTITY) -> tuple[str, str] | None:
    """A row's auxiliary question and its answer from the game (``kind`` in ``AUX_KINDS``), or
    None where the game does not answer it; ``board`` is the game's own position, ``image`` the
    symmetry the row shows it in (the answer is given in that image).

    ``reply``: the move the opponent played next (only when the row asks for the move that was
    played, so the reply answers that move); ``result``: who won the game. Neither is asked at
    play time: they add supervision about what follows a position to rows that cost the same.
    """
    if kind == "reply":
        if target != game.moves[ply] or ply + 1 >= len(game.moves):
            return None
        opponent = COLOR_NAMES[(not board.turn) != image.swap]
        return f"Which reply did {opponent} play?", image.iccs(game.moves[ply + 1])
    if kind == "result":
        answer = RESULT_ANSWERS.get(game.result)
        if answer is not None and image.swap:  # the colours change places in the image
            answer = SWAPPED_RESULT.get(answer, answer)
        return None if answer is None else ("Who won this game?", answer)
    raise DecisionInputError(f"unknown auxiliary question {kind!r}; known: {AUX_KINDS}", "aux")


def tokenizer_corpus(games: Sequence[GameRecord], count: int, seed: int) -> Iterator[str]:
    """Texts that train the tokenizer: rendered positions, their questions and answers."""
    for ref in sample_positions(games, count, seed):
        game = games[ref.game]
        ex = example_at(board_at(game, ref.ply), game.moves[ref.ply])
        yield ex.document
        yield ex.question["text"]
        yield ex.gold


def encode_example(
    ex: MoveExample,
    tokenizer: Tokenizer,
    special: SpecialIds,
    option_ids: dict[str, tuple[int, ...]] | None = None,
    acceptable: Collection[str] = (),
    aux: tuple[str, str] | None = None,
    soft: Mapping[str, float] | None = None,
) -> Row:
    """Lay an example out as the decoder does, with the gold move in the slot (EOS-padded) and
    every legal move as the row's options (``Row.options``, for the option loss).

    ``acceptable``: moves the option-set loss counts as acceptable besides the gold
    (``Row.option_set``); none, or all the options with them, leave the row without a set.

    ``option_ids``: an option -> token ids cache kept by the caller for this tokenizer (there
    are at most a few thousand ICCS moves; encoding a position's ~40 options was half of a
    training row's cost). The slot's length is the engine's (``ChoiceAnswer.budget``): the
    longest option.

    ``aux`` (question text, answer): a second question in the same joint group, after the move
    question, so its slot follows the move's and the move's slot keeps its place; its answer
    is trained by the diffusion loss only (the option loss reads the move's slot with this one
    masked: ``decision.train.step_loss``).

    ``soft``: move -> probability, the row's soft targets (``Row.soft_targets``, a teacher's
    distribution for distillation); every move must be among the options.
    """
    encode = tokenizer_context(tokenizer).canonical_ids  # as the decoder encodes text

    options = ex.question["answer"]["options"]
    known = {} if option_ids is None else option_ids
    for option in options:
        if option not in known:
            known[option] = tuple(encode(option))
    budget = max(len(known[o]) for o in options)
    questions, budgets, answers = [encode(ex.question["text"])], [budget], [encode(ex.gold)]
    if aux is not None:
        answer = encode(aux[1])
        questions.append(encode(aux[0]))
        budgets.append(max(budget, len(answer)))
        answers.append(answer)
    layout = build_layout(special, encode(ex.document), questions, budgets, answers)
    block_slots = layout.block_slots()
    slot_of = [-1] * len(layout.block)
    for span in block_slots:
        slot_of[span.start : span.end] = [span.question] * span.length
    # the options as the engine scores them: canonical tokens, [EOS]-padded to the slot
    padded = tuple((*known[o], *[special.eos] * (budget - len(known[o]))) for o in options)
    return Row(
        history_ids=layout.history_ids,
        history_segments=layout.history_segments,
        block_ids=layout.block,
        block_segments=layout.block_segments,
        slot_of=slot_of,
        roles=[ROLE_PLAIN] * len(questions),
        kind=KIND_STANDALONE if aux is None else KIND_JOINT,
        meta={"gold": ex.gold},
        options=padded,
        options_start=block_slots[0].start,
        option_set=_option_set(options, ex.gold, acceptable),
        soft_targets=_soft_targets(options, soft or {}),
    )


def _soft_targets(options: Sequence[str], soft: Mapping[str, float]
                  ) -> tuple[tuple[int, float], ...]:
    index = {option: i for i, option in enumerate(options)}
    unknown = sorted(set(soft) - set(index))
    if unknown:
        raise DecisionInputError(f"soft targets name moves that are not options: {unknown}",
                                 "soft_targets")
    return tuple((index[move], float(q)) for move, q in soft.items())


def _option_set(options: Sequence[str], gold: str, acceptable: Collection[str]
                ) -> tuple[int, ...]:
    if not acceptable:
        return ()
    keep = set(acceptable) | {gold}
    chosen = tuple(i for i, option in enumerate(options) if option in keep)
    return () if len(chosen) == len(options) else chosen


class MoveRowSource:
    """Training row ``i`` is a pure function of ``i`` (what the loop's exact resume needs).

    Positions with a single legal move are skipped (ModelPlayer never asks about them): row ``i``
    is the first usable reference at or after index ``i``, cycling over the sampled list (so the
    reference after a skipped one is used twice).

    ``mirror_share`` (augmentation): that share of the rows, chosen by ``i`` and ``seed`` alone,
    show the position mirrored left to right (files ``a`` <-> ``i``, history replayed in the
    mirror) with the master's move mirrored too; the rules are the same in the mirror
    (:mod:`apps.xiangqi.symmetry`), so the row is as true as the original.

    ``image_share`` (augmentation for symmetry pooling, :mod:`apps.xiangqi.pooling`): that
    share of the rows whose position is at ply ``image_from_ply`` or later, chosen by ``i`` and
    ``seed`` alone, show it in one of its three other images (mirrored, colours swapped, both;
    one third each), the move and any auxiliary answer mapped with it: the images the pooling
    player asks from that ply on. Not with ``mirror_share``.

    ``book`` with ``book_min_count`` >= 1 (targets): a position of the first ``book_games``
    games (the master games; teacher records after them keep their labels) that the book saw
    at least ``book_min_count`` times is labelled with the book's most frequent move there
    instead of the drawn game's move, so a recurring opening position always asks for one move.

    ``sound_depth`` >= 1 (the option-set loss): each row carries, as its set of acceptable
    moves, the target and the moves a material search of that depth keeps within 0 of the best
    (:func:`apps.xiangqi.search_guided.sound_moves`, the blunder check of
    :class:`~apps.xiangqi.search_guided.SearchGuidedPlayer`), so the loss moves probability
    off the moves that check would veto; 0 gives no set.

    ``aux`` in ``AUX_KINDS`` with ``aux_share`` > 0 (multi-task): that share of the rows of
    master games, chosen by ``i`` and ``seed`` alone, carry a second question in the same joint
    group (:func:`aux_question`), where the game answers it.

    ``soft_targets`` (distillation): row index -> :class:`SoftTarget`, in the row's own image
    (:mod:`apps.xiangqi.distil` writes them for a run's rows); a row found there carries them
    as ``Row.soft_targets``, once its position is checked to be theirs.
    """

    def __init__(self, games: Sequence[GameRecord], refs: Sequence[PositionRef],
                 tokenizer: Tokenizer, mirror_share: float = 0.0, seed: int = 0,
                 book: MoveBook | None = None, book_min_count: int = 0,
                 book_games: int | None = None, sound_depth: int = 0,
                 aux: str = "", aux_share: float = 0.0, image_share: float = 0.0,
                 image_from_ply: int = 0,
                 soft_targets: Mapping[int, SoftTarget] | None = None) -> None:
        if not refs:
            raise DecisionInputError("no positions to train on", "refs")
        if not 0.0 <= mirror_share <= 1.0:
            raise DecisionInputError("mirror_share must be in [0, 1]", "mirror_share")
        if not 0.0 <= image_share <= 1.0 or image_from_ply < 0:
            raise DecisionInputError("image_share must be in [0, 1] and image_from_ply >= 0",
                                     "image_share")
        if image_share > 0 and mirror_share > 0:
            raise DecisionInputError("mirror_share and image_share cannot both be set",
                                     "image_share")
        if book_min_count < 0 or (book_min_count > 0 and book is None):
            raise DecisionInputError("book_min_count must be >= 0 and > 0 needs a book",
                                     "book_min_count")
        if sound_depth < 0:
            raise DecisionInputError("sound_depth must be >= 0", "sound_depth")
        if not 0.0 <= aux_share <= 1.0 or (aux_share > 0 and aux not in AUX_KINDS):
            raise DecisionInputError(
                f"aux_share must be in [0, 1], and > 0 needs aux in {AUX_KINDS}", "aux_share")
        self.aux = aux if aux_share > 0 else ""
        self.aux_share = aux_share
        self.search = SearchConfig(depth=sound_depth) if sound_depth else None
        self.book = book if book_min_count > 0 else None
        self.book_min_count = book_min_count
        self.book_games = len(games) if book_games is None else book_games
        self.games = games
        self.refs = list(refs)
        self.tokenizer = tokenizer
        self.special = special_ids(tokenizer)
        self.mirror_share = mirror_share
        self.image_share = image_share
        self.image_from_ply = image_from_ply
        self.seed = seed
        self.soft_targets = soft_targets or {}
        self._option_ids: dict[str, tuple[int, ...]] = {}

    def mirrored(self, i: int) -> bool:
        """Whether row ``i`` shows the mirror image (deterministic in ``seed`` and ``i``)."""
        if self.mirror_share <= 0.0:
            return False
        return random.Random(f"mirror:{self.seed}:{i}").random() < self.mirror_share

    def image(self, i: int, board: Board) -> Symmetry:
        """The image row ``i`` shows its position ``board`` in (deterministic in seed and i)."""
        if self.mirrored(i):
            return MIRROR
        if self.image_share <= 0.0 or board_ply(board) < self.image_from_ply:
            return IDENTITY
        draw = random.Random(f"image:{self.seed}:{i}").random()
        if draw >= self.image_share:
            return IDENTITY
        return SYMMETRIES[1 + int(3 * draw / self.image_share)]

    def with_aux(self, i: int) -> bool:
        """Whether row ``i`` is offered the auxiliary question (deterministic in seed and i)."""
        if not self.aux:
            return False
        return random.Random(f"aux:{self.seed}:{i}").random() < self.aux_share

    def position(self, i: int) -> tuple[Board, str]:
        """Row ``i``'s board (mirrored or not) and the move it asks for."""
        board, gold, _ = self._drawn(i)
        return board, gold

    def _drawn(self, i: int) -> tuple[Board, str, tuple[str, str] | None]:
        """Row ``i``'s board, target and auxiliary question (None: none)."""
        for k in range(len(self.refs)):
            ref = self.refs[(i + k) % len(self.refs)]
            game = self.games[ref.game]
            board = board_at(game, ref.ply)
            if len(board.legal_moves) > 1:
                gold = self.target(ref, board)
                image = self.image(i, board)
                aux = None
                if ref.game < self.book_games and self.with_aux(i):
                    aux = aux_question(self.aux, game, ref.ply, gold, board, image)
                if image != IDENTITY:
                    return image.board(board), image.iccs(gold), aux
                return board, gold, aux
        raise DecisionInputError("every sampled position has a single legal move", "refs")

    def example(self, i: int) -> MoveExample:
        return example_at(*self.position(i))

    def target(self, ref: PositionRef, board: Board) -> str:
        """The move row ``ref`` asks for: the game's, or the book's (see the class)."""
        played = self.games[ref.game].moves[ref.ply]
        if self.book is None or ref.game >= self.book_games:
            return played
        return book_target(self.book, board, played, self.book_min_count)

    def row(self, i: int) -> Row:
        board, gold, aux = self._drawn(i)
        acceptable: Collection[str] = ()
        if self.search is not None:
            acceptable = {m.iccs() for m in sound_moves(board, self.search, 0.0)}
        soft = self.soft_targets.get(i)
        if soft is not None and soft.fen != board.fen():
            raise DecisionInputError(
                f"row {i}: the soft targets are for {soft.fen}, the row shows {board.fen()} "
                "(made for another config?)", "soft_targets")
        return encode_example(example_at(board, gold), self.tokenizer, self.special,
                              self._option_ids, acceptable, aux,
                              None if soft is None else soft.probs)
