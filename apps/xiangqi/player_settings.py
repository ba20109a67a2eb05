"""Which player the game service plays with, from its settings.

The service and the terminal game build their player here (:func:`player_from_setting`) from the
three ``DECISION_XIANGQI_*`` settings, and refuse a bad one before they start
(:func:`check_player_setting`); the players themselves are in :mod:`apps.xiangqi.model_player`
and :mod:`apps.xiangqi.search_guided`.

Which model (:func:`player_from_setting`, setting ``DECISION_XIANGQI_MODEL``):

* ``auto`` (default): the dedicated Xiangqi checkpoint at ``models/xiangqi`` when it exists, else
  the default decision model (inside ``decision serve``: the one the service has loaded, reached
  through :class:`ServiceModel`). The default model was never trained on Xiangqi, so its moves
  are legal but not chosen for strength.
* ``default``: the default decision model; ``random`` / ``greedy``: the rules engine's baseline
  players (no model); any other value: a checkpoint directory.

How a model plays (setting ``DECISION_XIANGQI_SEARCH``, :func:`search_depth_setting`): ``3``
(default) or another depth: as a :class:`~apps.xiangqi.search_guided.SearchGuidedPlayer`, the
model's move with blunders vetoed by a material search that deep; ``0``: the model alone
(:class:`~apps.xiangqi.model_player.ModelPlayer`).

How the move question is asked (setting ``DECISION_XIANGQI_POOLING``, :func:`pooling_setting`):
``auto`` (default): symmetry pooling from ply 20 for the model alone (:mod:`apps.xiangqi.pooling`,
the position's four images asked in one batch), the position as is behind the search; ``off``:
as is; ``on``: pooling from ply 20 for either player; a whole number N: pooling from ply N.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from apps.xiangqi.model_player import ModelPlayer
from apps.xiangqi.players import Player
from apps.xiangqi.pooling import POOL_FROM_PLY, SymmetryPooling
from apps.xiangqi.search import SearchConfig
from apps.xiangqi.search_guided import DEFAULT_SEARCH_DEPTH, SearchGuidedPlayer
from decision.errors import DecisionInputError

# Beside the default model (<repo>/models/default), whatever the working directory.
XIANGQI_CHECKPOINT = Path(__file__).resolve().parents[2] / "models" / "xiangqi"
SETTING_ENV = "DECISION_XIANGQI_MODEL"
SEARCH_ENV = "DECISION_XIANGQI_SEARCH"
POOLING_ENV = "DECISION_XIANGQI_POOLING"


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


def _has_weights(path: Path) -> bool:
    """Weight files (or their index) in ``path``: with no config.json beside them, a model an
    export is moving in (config.json comes last) or one it was killed in the middle of."""
    from decision.model.safetensors_files import INDEX_NAME  # torch: only once a model is built

    return any(path.glob("*.safetensors")) or (path / INDEX_NAME).is_file()


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
    shipped = XIANGQI_CHECKPOINT
    if value == "auto" and (_has_checkpoint(shipped) or _has_weights(shipped)):
        # weights without config.json (an export under way, or killed midway) refuse to load
        # ("missing config.json"; the service asks again at the next model move) rather than
        # playing the untrained default model in the Xiangqi model's place for good
        return _player(load_model(str(shipped), device=device), "xiangqi-model", depth, pool)
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
