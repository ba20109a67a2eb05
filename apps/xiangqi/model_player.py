"""The decision model as a Xiangqi player: it reads the position and answers a choice of move.

:class:`ModelPlayer` renders the board as a document (:func:`apps.xiangqi.render.position_document`)
and asks one question whose answer schema is a ``choice`` among the legal moves in ICCS
(:func:`apps.xiangqi.render.move_question`), less the moves that let the game end by repetition at
once (:func:`repetition_safe_moves`). Constrained decoding guarantees the answer is one of the
options, so the model never plays an illegal move, whatever its weights.

Which model (:func:`player_from_setting`, setting ``DECISION_XIANGQI_MODEL``):

* ``auto`` (default): the dedicated Xiangqi checkpoint at ``models/xiangqi`` when it exists, else
  the default decision model (inside ``decision serve``: the one the service has loaded). The
  default model was never trained on Xiangqi, so its moves are legal but not chosen for strength.
* ``default``: the default decision model; ``random`` / ``greedy``: the rules engine's baseline
  players (no model); any other value: a checkpoint directory.

How a model plays (setting ``DECISION_XIANGQI_SEARCH``): ``3`` (default) or another depth: as a
:class:`SearchGuidedPlayer`, the model's move with blunders vetoed by a material search that deep;
``0``: the model alone (:class:`ModelPlayer`).

How the move question is asked (setting ``DECISION_XIANGQI_POOLING``, :func:`pooling_setting`):
``auto`` (default): symmetry pooling from ply 20 for the model alone (:mod:`apps.xiangqi.pooling`,
the position's four images asked in one batch), the position as is behind the search; ``off``:
as is; ``on``: pooling from ply 20 for either player; a whole number N: pooling from ply N.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from apps.xiangqi.board import Board
from apps.xiangqi.core import Color, Move
from apps.xiangqi.outcome import Outcome, Termination
from apps.xiangqi.pooling import (
    POOL_FROM_PLY,
    ImageQuestion,
    SymmetryPooling,
    image_questions,
    pooled_pick,
    pooled_probabilities,
)
from apps.xiangqi.search import SearchConfig
from apps.xiangqi.symmetry import IDENTITY
from decision.errors import DecisionInputError

# Beside the default model (<repo>/models/default), whatever the working directory.
XIANGQI_CHECKPOINT = Path(__file__).resolve().parents[2] / "models" / "xiangqi"
SETTING_ENV = "DECISION_XIANGQI_MODEL"
SEARCH_ENV = "DECISION_XIANGQI_SEARCH"
POOLING_ENV = "DECISION_XIANGQI_POOLING"
DEFAULT_SEARCH_DEPTH = 3
# depth 3 and margin 0 (soldier units a move may lose against the best searched move) were
# the best of those tried on 500 validation positions of another seed than the reported ones
# (30.2% top-1; depth 2 with margin 0.5, 4x cheaper: 27.2%); docs/xiangqi-model.md
DEFAULT_MARGIN = 0.0


class Player(Protocol):
    """Anything that picks a legal move for the side to move."""

    def choose(self, board: Board) -> Move: ...


@dataclass(frozen=True)
class MoveChoice:
    """A chosen move with what is known about it (confidence only from a model)."""

    move: Move
    confidence: float | None
    source: str


@dataclass(frozen=True)
class MoveAnswer:
    """The model's move for a position, its confidence and, when asked for (or pooled), every
    option's probability in ICCS."""

    move: Move
    confidence: float | None
    probabilities: dict[str, float] | None


# How the player asks for the move, a choice of four tokens: "score" scores every legal move by
# the chain rule over its tokens (decision.joint.scoring: the engine's score_options); "token" and
# "answer" denoise, fixing one token a step or the first fix's whole move. Of the two denoising
# rules "token" was the better at every stage (stage 5: 14.35 % top-1 against 13.55 % for
# "answer" on the 2,000 validation positions of docs/xiangqi-model.md); scoring is better than
# both (15.55 %; same page).
MOVE_DECODERS = ("score", "token", "answer")
MOVE_DECODER = "score"


def decoder_options(decoder: str) -> dict[str, Any]:
    """The ``decide`` options of one of :data:`MOVE_DECODERS`."""
    if decoder == "score":
        return {"score_options": True}
    if decoder in ("token", "answer"):
        return {"commit": decoder}
    raise ValueError(f"unknown move decoder {decoder!r}; known: {list(MOVE_DECODERS)}")


class ModelPlayer:
    """Plays the move a :class:`decision.DecisionModel` chooses among the legal moves.

    The choice's options leave out a move that lets the game end by repetition at once, a loss
    or a draw the model cannot see coming (:func:`repetition_safe_moves`), as they leave out an
    illegal one; the document still lists every legal move, as in training.
    ``decide`` is called under a lock: one model instance serves one position at a time.
    """

    def __init__(self, model: Any, name: str = "decision-model", threshold: float = 0.9,
                 decoder: str = MOVE_DECODER, pooling: SymmetryPooling | None = None) -> None:
        decoder_options(decoder)  # fail now on an unknown decoder
        if pooling is not None and decoder != "score":
            raise ValueError("symmetry pooling averages option probabilities: it needs the "
                             f"'score' decoder, not {decoder!r}")
        self.model = model
        self.name = name
        self.threshold = threshold
        self.decoder = decoder
        self.pooling = pooling
        self._lock = threading.Lock()

    def choose_with_info(self, board: Board) -> MoveChoice:
        """Ask the model; the answer is parsed back into a legal :class:`Move`."""
        only = _only_move(board)
        if only is not None:  # nothing to decide; skip the forward passes
            return MoveChoice(only, 1.0, self.name)
        answer = self._ask(board)
        return MoveChoice(answer.move, answer.confidence, self.name)

    def _ask(self, board: Board, return_probabilities: bool = False) -> MoveAnswer:
        """The model's move for the position: asked as is, or in each image of the position
        when ``pooling`` says so (apps/xiangqi/pooling.py), the probabilities then averaged."""
        options = repetition_safe_moves(board)
        images = self.pooling.images_of(board) if self.pooling is not None else (IDENTITY,)
        pooled = len(images) > 1
        asked = image_questions(board, options, images)
        with self._lock:
            decisions = decide_images(self.model, asked, self.threshold,
                                       return_probabilities or pooled, self.decoder)
        answers = [decision.answers[0] for decision in decisions]
        if pooled:
            probabilities = pooled_probabilities(
                images, [answer.option_probabilities or {} for answer in answers])
            own = answers[0].option_probabilities or {}
            value = pooled_pick(probabilities, own)
            confidence: float | None = probabilities[value]
        else:
            probabilities = answers[0].option_probabilities
            value, confidence = str(answers[0].value), _confidence(answers[0])
        move = Move.from_iccs(value)
        if not board.is_legal(move):  # constrained decoding makes this impossible
            raise RuntimeError(f"the model answered {value!r}, which is not a legal move")
        return MoveAnswer(move, confidence, probabilities)

    def choose(self, board: Board) -> Move:
        return self.choose_with_info(board).move


class SearchGuidedPlayer(ModelPlayer):
    """The model's move, unless a shallow material search shows it blunders.

    The search (:mod:`apps.xiangqi.search`) scores every legal move; a move whose score is more
    than ``margin`` soldier units below the best is vetoed, and so is one that lets the game end
    by repetition while another is left, unless the rules would give that repetition to the
    player (the opponent's perpetual check; :func:`sound_moves`). The model picks among the
    rest: its own answer when that survives, else the surviving move it gives the highest
    probability (all options' probabilities come from the same decode). The model still makes
    every choice the search cannot tell apart, which in quiet positions is all of them.
    """

    def __init__(self, model: Any, name: str = "decision-model", threshold: float = 0.9,
                 search: SearchConfig | None = None, margin: float = DEFAULT_MARGIN,
                 decoder: str = MOVE_DECODER, pooling: SymmetryPooling | None = None) -> None:
        super().__init__(model, name, threshold, decoder, pooling)
        self.search = search or SearchConfig(depth=DEFAULT_SEARCH_DEPTH)
        self.margin = check_margin(margin)
        self.overrides = 0  # model answers the search vetoed

    def own_and_guided(self, board: Board) -> tuple[MoveAnswer, Move]:
        """From one asking (one decode, or one an image when pooled): the model's answer and
        the move this player plays (the model's own if the search lets it through, else the
        likeliest sound one)."""
        sound = sound_moves(board, self.search, self.margin)
        answer = self._ask(board, return_probabilities=True)
        return answer, guided_pick(answer.move, answer.probabilities, sound)

    def choose_with_info(self, board: Board) -> MoveChoice:
        only = _only_move(board)
        if only is not None:
            return MoveChoice(only, 1.0, self.name)
        answer, chosen = self.own_and_guided(board)
        if chosen == answer.move:
            return MoveChoice(chosen, answer.confidence, self.name)
        self.overrides += 1
        probability = (answer.probabilities or {}).get(chosen.iccs())
        return MoveChoice(chosen, probability, f"{self.name}+search")


def repetition_safe_moves(board: Board) -> list[Move]:
    """The legal moves that do not let the game end by repetition at once, unless in the
    mover's favour; all of them when every one does.

    A move ends the game at once when it makes the third occurrence of a position, or when a
    reply of the opponent's does (the rule counts the cycle, whoever completes it): a loss for
    the side that checked on every move of it, else a draw. The document shows no move history,
    so the model cannot see either coming; this is the rules' verdict one reply deep, not a
    search (material and mates are not looked at). A draw is avoided too: the model never chose
    it, and against the baseline players avoiding it wins more than it loses
    (docs/xiangqi-model.md). A move that ends the game itself (:meth:`Board.outcome`: a mate,
    the 120-ply draw, a repetition) is judged by that end alone: no reply follows it.
    """
    legal = board.legal_moves
    if not board.has_repeated_position():  # no third occurrence is two plies away
        return legal
    us = board.turn
    work = board.copy()
    safe = []
    for move in legal:
        work.push(move)
        outcome = work.outcome()
        if outcome is not None:  # the game ends on this move
            ends = _lost_or_drawn_by_repetition(outcome, us)
        else:
            ends = _a_reply_completes_threefold(work, us)
        work.pop()
        if not ends:
            safe.append(move)
    return safe or legal


def _only_move(board: Board) -> Move | None:
    """The single legal move, if there is just one; raises when the game is over."""
    legal = board.legal_moves
    if not legal:
        raise ValueError("the side to move has no legal move: the game is over")
    return legal[0] if len(legal) == 1 else None


def _confidence(answer: Any) -> float | None:
    confidence = getattr(answer, "confidence", None)
    return None if confidence is None else float(confidence)


def check_margin(margin: float) -> float:
    """``margin`` if it is a usable one: a finite number >= 0 (a negative margin would veto even
    the best move, leaving nothing to play)."""
    if not (math.isfinite(margin) and margin >= 0):
        raise ValueError(f"the search margin must be a finite number >= 0, got {margin!r}")
    return margin


def sound_moves(board: Board, search: SearchConfig, margin: float) -> set[Move]:
    """The legal moves a :class:`SearchGuidedPlayer` may play: searched within ``margin`` of the
    best, and not letting the game end by repetition unless the rules give it to the mover (the
    opponent's perpetual check; see :func:`_repetition_classes`).

    When every move within the margin would repeat (typically a perpetual check, which loses),
    the best of the moves that do not are taken instead, also within ``margin``; only when every
    legal move repeats, or every one that does not is searched as a forced loss (being mated is
    no way out of a repetition, which at worst loses too), is a repeating one kept.

    Moves that win the game at once (:meth:`Board.outcome`) come first and alone: the search does
    not know the repetition rule, so the move that makes the third occurrence of the opponent's
    perpetual check scored as a quiet move, and a capture could veto it.
    """
    from apps.xiangqi.search import MATE, best_score, move_scores

    legal = board.legal_moves
    winning = _winning_at_once(board, legal)
    if winning:
        return winning
    floor = best_score(board, search) - check_margin(margin)
    scores = move_scores(board, legal, search, floor=floor)
    sound = {m for m, score in scores.items() if score >= floor}
    safe, fresh = _repetition_classes(board, sound)
    if safe:
        return safe
    others, _ = _repetition_classes(board, set(legal) - sound)
    if others:
        exact = move_scores(board, sorted(others, key=Move.iccs), search)
        top = max(exact.values())
        if top > -MATE / 2:
            return {m for m, score in exact.items() if score >= top - margin}
    return fresh or sound


def _winning_at_once(board: Board, moves: Sequence[Move]) -> set[Move]:
    """The ``moves`` after which the game is over and won by the side to move now."""
    us, work, winning = board.turn, board.copy(), set()
    for move in moves:
        work.push(move)
        outcome = work.outcome()
        work.pop()
        if outcome is not None and outcome.winner == us:
            winning.add(move)
    return winning


def guided_pick(answer: Move, probabilities: dict[str, float] | None, sound: set[Move]) -> Move:
    """The model's ``answer`` if it is sound, else the sound move it gives the most probability
    (ties broken by ICCS order, so the choice is deterministic)."""
    if answer in sound:
        return answer
    probabilities = probabilities or {}
    return max(sound, key=lambda m: (probabilities.get(m.iccs(), 0.0), m.iccs()))


def _repetition_classes(board: Board, moves: set[Move]) -> tuple[set[Move], set[Move]]:
    """(safe, fresh) subsets of ``moves``: fresh ones reach a position not seen before in the
    game, or one whose repetition the rules give to the mover (:func:`_repeats_to_win`: the
    opponent's perpetual check); safe ones are fresh and no reply of the opponent's then makes a
    position's third occurrence that the mover does not win. The search does not see the
    repetition rule, and a player ahead in material that keeps checking loses by it (perpetual
    check); one that is checked perpetually wins by it, and must not give material away to
    escape the repetition. A move that ends the game itself (a mate, the 120-ply draw, a
    repetition) is judged by :meth:`Board.outcome` alone, no reply or cycle following it: in
    neither set when that end is a repetition the mover loses or draws, else in both."""
    us = board.turn
    work = board.copy()
    fresh, safe = set(), set()
    for move in moves:
        work.push(move)
        outcome = work.outcome()
        if outcome is not None:  # the game ends on this move
            if not _lost_or_drawn_by_repetition(outcome, us):
                fresh.add(move)
                safe.add(move)
        elif work.repetition_count() == 1 or _repeats_to_win(work, us):
            fresh.add(move)
            if not _a_reply_completes_threefold(work, us):
                safe.add(move)
        work.pop()
    return safe, fresh


def _a_reply_completes_threefold(board: Board, us: Color) -> bool:
    """Whether some legal move of the side to move (``us``'s opponent) makes a position's third
    occurrence that ``us`` does not win; none can unless a position already occurred twice."""
    if not board.has_repeated_position():
        return False
    return any(_completes_threefold(board, reply, us) for reply in board.legal_moves)


def _completes_threefold(board: Board, move: Move, us: Color) -> bool:
    """Whether ``move`` makes a position's third occurrence that ``us`` does not win."""
    board.push(move)
    try:
        return board.is_repetition(3) and _lost_or_drawn_by_repetition(board.outcome(), us)
    finally:
        board.pop()


def _lost_or_drawn_by_repetition(outcome: Outcome | None, us: Color) -> bool:
    """Whether ``outcome`` ends the game by repetition and not in ``us``'s favour. Repetition
    comes before the 120-ply draw in :meth:`Board.outcome`, a mate before both."""
    return (outcome is not None and outcome.winner != us
            and outcome.termination in (Termination.REPETITION, Termination.DRAW_REPETITION))


def _repeats_to_win(board: Board, us: Color) -> bool:
    """On a position that occurred before (``us`` just moved there): whether the rules give the
    repetition to ``us``, now if this is its third occurrence, else when the cycle since its last
    occurrence is played once more (the opponent checked on every move of it, ``us`` did not).
    The game ends where the replayed cycle first ends it: the third occurrence of a position
    inside the cycle, or the 120-ply draw partway through, which gives ``us`` nothing."""
    if not board.is_repetition(3):
        probe = board.copy()
        key = probe.zobrist_hash()
        cycle: list[Move] = []
        while not cycle or len(cycle) % 2 or probe.zobrist_hash() != key:
            cycle.append(probe.pop())
        board = board.copy()
        for move in reversed(cycle):
            board.push(move)
            if board.outcome() is not None:
                break
    outcome = board.outcome()
    return outcome is not None and outcome.winner == us


def decide_request(document: str, question: Any, threshold: float = 0.9,
                   return_probabilities: bool = False,
                   decoder: str = MOVE_DECODER) -> dict[str, Any]:
    """The player's move question as the keyword arguments of ``decide`` and as one request of
    ``decide_many`` (interfaces.md), with ``decoder``'s options."""
    return {"document": document, "questions": [question], "mode": "joint",
            "threshold": threshold, "return_probabilities": return_probabilities,
            **decoder_options(decoder)}


def decide_images(model: Any, asked: Sequence[ImageQuestion], threshold: float,
                   return_probabilities: bool, decoder: str) -> list[Any]:
    """Each image's decision (interfaces.md): in one batch when the model has ``decide_many``
    (a loaded DecisionModel: a pooled move then costs 2.3x a move as is instead of 3.5x on one
    CPU thread, docs/benchmarks.md), else one ``model.decide`` each, in turn; a bare model
    without either goes through the joint engine."""
    requests = [decide_request(a.document, a.question, threshold, return_probabilities, decoder)
                for a in asked]
    batch = getattr(model, "decide_many", None)
    if len(requests) > 1 and callable(batch):
        return batch(requests)
    if hasattr(model, "decide"):
        return [model.decide(**request) for request in requests]
    from decision.joint.engine import decide_many

    return decide_many(model, requests)


def choose_move(player: Player, board: Board) -> MoveChoice:
    """A player's move with its details when the player gives them."""
    detailed = getattr(player, "choose_with_info", None)
    if callable(detailed):
        return detailed(board)
    return MoveChoice(player.choose(board), None, type(player).__name__)


class ServiceModel:
    """The decision service's loaded model, reached through its worker (``decision serve``).

    ``decide`` has ``DecisionModel.decide``'s signature, so :class:`ModelPlayer` uses it
    unchanged; the request joins the service's batches and metrics. It must be called from a
    thread that anyio started (a sync FastAPI route), because the service is async.
    """

    def __init__(self, service: Any) -> None:
        self.service = service

    def decide(
        self, document: str, questions: list[Any], mode: str = "joint", threshold: float = 0.9,
        return_probabilities: bool = False, commit: str | None = None,
        score_options: bool = False,
    ) -> Any:
        import anyio.from_thread

        from decision.serve.api import DecideBody, DecideOptions, QuestionIn

        items = [q.model_dump(by_alias=True) if hasattr(q, "model_dump") else dict(q)
                 for q in questions]
        body = DecideBody(
            document=document,
            questions=[QuestionIn(**item) for item in items],
            mode=mode,  # type: ignore[arg-type]
            options=DecideOptions(threshold=threshold,
                                  return_probabilities=return_probabilities,
                                  commit=commit,  # type: ignore[arg-type]
                                  score_options=score_options),
        )
        return anyio.from_thread.run(self.service.decide, body)


def _has_checkpoint(path: Path) -> bool:
    return (path / "config.json").is_file()


_UNTRAINED = "default-model (untrained on xiangqi)"


_BASELINES = ("random", "greedy")  # the rules engine's players: no model, no search


def _setting_value(setting: str | None) -> str:
    """The player setting in force: ``setting``, else ``$DECISION_XIANGQI_MODEL``, else auto."""
    return (setting or os.environ.get(SETTING_ENV) or "auto").strip()


def player_from_setting(
    setting: str | None = None, device: str = "cpu", service: Any = None,
    search: str | int | None = None, pooling: str | int | None = None,
) -> Player:
    """Build the player a setting names (default: ``$DECISION_XIANGQI_MODEL`` or ``auto``).

    ``service``: the running decision service, if any; the default model is then the one it has
    already loaded (through :class:`ServiceModel`) instead of a second copy. ``search``: the
    search depth (see :func:`search_depth_setting`); ``pooling``: how the move is asked (see
    :func:`pooling_setting`).
    """
    value = _setting_value(setting)
    if value in _BASELINES:
        from apps.xiangqi import players

        return players.GreedyPlayer() if value == "greedy" else players.RandomPlayer()

    from decision import load_model

    depth = search_depth_setting(search)
    pool = pooling_setting(pooling, depth)
    if value == "auto" and _has_checkpoint(XIANGQI_CHECKPOINT):
        model = load_model(str(XIANGQI_CHECKPOINT), device=device)
        return _player(model, "xiangqi-model", depth, pool)
    if value in ("auto", "default"):
        if service is not None:
            return _player(ServiceModel(service), _UNTRAINED, depth, pool)
        return _player(load_model(None, device=device), _UNTRAINED, depth, pool)
    path = Path(value)
    return _player(load_model(str(path), device=device), path.name or str(path), depth, pool)


def setting_loads_model(setting: str | None = None) -> bool:
    """Whether the player a setting names needs a model (``random`` and ``greedy`` do not)."""
    return _setting_value(setting) not in _BASELINES


def check_player_setting(setting: str | None = None, search: str | int | None = None,
                         pooling: str | int | None = None) -> None:
    """Refuse, before a server starts, settings that :func:`player_from_setting` would only fail
    on at the first model move: a search depth outside 0-3, a pooling setting that is not auto,
    on, off or a ply, or a checkpoint path that is not a model directory. Loads nothing (the
    model is loaded on the first model move)."""
    value = _setting_value(setting)
    if value in _BASELINES:
        return
    search_depth_setting(search)
    pooling_setting(pooling)
    if value not in ("auto", "default") and not _has_checkpoint(Path(value)):
        # named as it was given: from `decision serve` (no setting) the variable alone, where
        # "(or --model)" read as that command's --model, the decision model's
        given = SETTING_ENV if setting is None else f"--model (or {SETTING_ENV})"
        raise DecisionInputError(
            f"{given} must be auto, default, random, greedy or a model directory with a "
            f"config.json, got {value!r}",
            SETTING_ENV,
        )


def search_depth_setting(value: str | int | None = None) -> int:
    """The search depth to play with: ``value``, else ``$DECISION_XIANGQI_SEARCH``, else 3.

    A bad value is a ``DecisionInputError`` (a ``ValueError``): the game API answers it 503 with
    the message, like a model that cannot be loaded, and the terminal game exits 2 with it.
    """
    raw = value if value is not None else os.environ.get(SEARCH_ENV, "").strip() or None
    if raw is None:
        return DEFAULT_SEARCH_DEPTH
    try:
        depth = int(raw)
    except ValueError:
        depth = -1
    if not 0 <= depth <= 3:
        raise DecisionInputError(
            f"{SEARCH_ENV} must be a search depth from 0 (the model alone) to 3, got {raw!r}",
            SEARCH_ENV,
        )
    return depth


def pooling_setting(value: str | int | None = None, depth: int = 0) -> SymmetryPooling | None:
    """How the move question is asked: ``value``, else ``$DECISION_XIANGQI_POOLING``, else auto.

    ``auto``: :class:`SymmetryPooling` from ply ``POOL_FROM_PLY`` for the model alone (search
    ``depth`` 0), the position as is behind the search, where pooling measured level
    (docs/xiangqi-model.md, "Symmetry pooling"); ``off``: the position as is (None); ``on``:
    pooling from ply ``POOL_FROM_PLY``; a whole number N >= 0: pooling from ply N. A bad value
    is a ``DecisionInputError``, answered like a bad search depth.
    """
    raw = value if value is not None else os.environ.get(POOLING_ENV, "").strip() or None
    word = str(raw).strip().lower() if raw is not None else "auto"
    if word == "auto":
        word = "on" if depth == 0 else "off"
    if word == "off":
        return None
    if word == "on":
        return SymmetryPooling(POOL_FROM_PLY)
    if word.isascii() and word.isdigit():
        return SymmetryPooling(int(word))
    raise DecisionInputError(
        f"{POOLING_ENV} must be auto, off, on (symmetry pooling from ply {POOL_FROM_PLY}) or "
        f"the ply to pool from (a whole number >= 0), got {raw!r}",
        POOLING_ENV,
    )


def _player(model: Any, name: str, depth: int,
            pooling: SymmetryPooling | None = None) -> ModelPlayer:
    if depth == 0:
        return ModelPlayer(model, name, pooling=pooling)
    return SearchGuidedPlayer(model, name, search=SearchConfig(depth=depth), pooling=pooling)
