"""Which rows make up training step ``s``'s batch: plain order, or length-sorted windows.

Rows are right-padded to the longest history in their batch (rows.collate), so a batch of mixed
lengths spends part of every history pass on padding (about 20 % for Xiangqi positions, whose
histories run from ~160 to ~460 tokens). With ``window = W > 1`` the rows of W consecutive
batches are sorted by history length and cut into W batches of neighbours, which are then taken
in an order shuffled per window (so the steps do not run short-to-long). Every row is still used
exactly once, and the batch of step ``s`` is a pure function of ``s``, which is what the loop's
exact resume needs.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from decision.train.rows import Row


class StepBatches:
    """``rows_for(step)``: the rows of a step's batch, for a row source ``rows(index)``."""

    def __init__(
        self, rows: Callable[[int], Row], batch_size: int, window: int = 1, seed: int = 0
    ) -> None:
        if batch_size < 1 or window < 1:
            raise ValueError("batch_size and window must be >= 1")
        self.rows = rows
        self.batch_size = batch_size
        self.window = window
        self.seed = seed
        self._window_index = -1
        self._window_rows: list[Row] = []
        self._batches: list[list[int]] = []

    def rows_for(self, step: int) -> list[Row]:
        bs = self.batch_size
        if self.window == 1:
            return [self.rows(step * bs + i) for i in range(bs)]
        w, k = divmod(step, self.window)
        if w != self._window_index:
            self._fill_window(w)
        return [self._window_rows[j] for j in self._batches[k]]

    def _fill_window(self, w: int) -> None:
        bs, n = self.batch_size, self.batch_size * self.window
        first = w * n
        rows = [self.rows(first + j) for j in range(n)]
        order = sorted(range(n), key=lambda j: (len(rows[j].history_ids), j))
        chunks = [order[b * bs : (b + 1) * bs] for b in range(self.window)]
        # The seed and window index fix the order: the same steps on every run and resume.
        random.Random(f"{self.seed}:{w}").shuffle(chunks)
        self._window_index, self._window_rows, self._batches = w, rows, chunks
