"""A model wrapper that answers concurrent ``decide`` calls in one batch, for the matches.

:class:`BatchingModel` has ``DecisionModel.decide``'s signature, so each game of a match
(:mod:`apps.xiangqi.matches`) runs in its own thread with its own ``ModelPlayer`` on it, and the
games' model moves are gathered into one ``decide_many`` batch (the same engine ``decide`` uses).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


class BatchingClosed(RuntimeError):
    """A decision asked of a :class:`BatchingModel` that was closed (a match being stopped)."""


class BatchingModel:
    """``decide`` with DecisionModel's signature; concurrent calls are answered by one batch.

    A collector thread takes the first waiting request, then gathers more until ``expected()``
    requests are waiting (the games that can ask now) or ``wait_s`` passes, and answers them all
    with ``decide_many`` (the same engine ``decide`` uses).
    """

    def __init__(self, model: Any, expected: Callable[[], int] | None = None,
                 max_batch: int = 64, wait_s: float = 0.5) -> None:
        self.model = model
        self.tokenizer = model.tokenizer
        self.expected = expected or (lambda: max_batch)
        self.max_batch = max_batch
        self.wait_s = wait_s
        self.batches: list[int] = []  # size of every batch run
        self._queue: queue.Queue[tuple[dict[str, Any], Future[Any]] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self._abandon = False
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()

    def decide(self, document: str, questions: list[Any], mode: str = "joint",
               threshold: float = 0.9, return_probabilities: bool = False,
               commit: str | None = None, score_options: bool = False) -> Any:
        fut: Future[Any] = Future()
        request = {"document": document, "questions": questions, "mode": mode,
                   "threshold": threshold, "return_probabilities": return_probabilities,
                   "commit": commit, "score_options": score_options}
        with self._lock:  # nothing is queued behind the collector's end
            if self._closed:
                raise BatchingClosed("the batching model is closed")
            self._queue.put((request, fut))
        return fut.result()

    def close(self, abandon: bool = False) -> None:
        """Stop the collector once the requests queued so far are answered; ``abandon``: fail
        them instead (BatchingClosed), and the batch being decided, if any, is the last one.
        Every later ``decide`` fails at once, so threads still playing end promptly."""
        with self._lock:
            self._abandon = self._abandon or abandon
            if not self._closed:
                self._closed = True
                self._queue.put(None)
        self._thread.join()

    def _collect(self) -> None:
        from decision.joint.engine import decide_many

        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            deadline = time.monotonic() + self.wait_s
            while len(batch) < min(self.max_batch, max(1, self.expected())):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    item = self._queue.get(timeout=left)
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)
                    break
                batch.append(item)
            if self._abandon:
                for _, fut in batch:
                    fut.set_exception(BatchingClosed("the batching model was closed"))
                continue
            self.batches.append(len(batch))
            try:
                results = decide_many(self.model, [r for r, _ in batch])
            except Exception as exc:  # noqa: BLE001 - handed to every waiting caller
                for _, fut in batch:
                    fut.set_exception(exc)
                continue
            for (_, fut), result in zip(batch, results, strict=True):
                fut.set_result(result)
