"""``EngineConfig``: the decoding options beyond the per-request ones, refused when built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from decision.joint.sampler import check_choice
from decision.joint.scoring import ORDERS as SCORING_ORDERS
from decision.joint.scoring import order_positions

COMMITS = ("answer", "token")


@dataclass(frozen=True)
class EngineConfig:
    """Decoding options beyond the per-request ones.

    ``max_block_tokens``: the largest answer block ``auto`` puts in one joint pass (a question
    whose slot alone is larger runs standalone). ``reuse_document_cache``: prefill each document
    once and commit the questions onto it; off, every row prefills its whole history.
    ``min_scope``: the default sampler's "at least one token a step" applies per pass ("row")
    or per answer slot ("slot"); ``commit``: a token that rule picks is fixed with the rest of
    its answer ("answer", the default) or alone ("token"); see ``ThresholdSamplerConfig``.
    ``scoring_orders``: the decoding orders a request with ``score_options`` averages over
    (``decision.joint.scoring``).
    """

    max_block_tokens: int = 256
    reuse_document_cache: bool = True
    min_scope: Literal["row", "slot"] = "row"
    commit: Literal["token", "answer"] = "answer"
    scoring_orders: tuple[str, ...] = SCORING_ORDERS

    def __post_init__(self) -> None:
        # refused when built, not when a request meets them: an unknown scoring order used to
        # fail only after the open answers were denoised, a bad ``commit`` was blamed on the
        # request's field, and a bad ``min_scope`` or ``max_block_tokens`` decoded silently
        limit = self.max_block_tokens
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(
                f"EngineConfig.max_block_tokens must be an integer >= 1, got {limit!r}")
        if not isinstance(self.reuse_document_cache, bool):
            raise ValueError("EngineConfig.reuse_document_cache must be a bool, got "
                             f"{self.reuse_document_cache!r}")
        check_choice(self.min_scope, ("row", "slot"), "EngineConfig.min_scope")
        check_choice(self.commit, COMMITS, "EngineConfig.commit")
        orders = self.scoring_orders
        if isinstance(orders, str) or not isinstance(orders, list | tuple) or not orders:
            raise ValueError("EngineConfig.scoring_orders must be a non-empty tuple of orders, "
                             f"got {orders!r}")
        for order in orders:
            if not isinstance(order, str):
                raise ValueError(
                    f"EngineConfig.scoring_orders: an order is a string, got {order!r}")
            order_positions(order, 1)  # ValueError naming the order and the known ones
        object.__setattr__(self, "scoring_orders", tuple(orders))  # a list: hashable, comparable
