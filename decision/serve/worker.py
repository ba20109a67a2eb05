"""The single worker thread that owns the model: a bounded queue in, batched ``decide_many`` out.

Why one thread: the model (and its compiled-schema caches) is not shared between threads, and a
batch of requests decided in one forward is cheaper than the same requests one by one. Requests
that arrive while the worker is busy wait in the queue (bounded by the requests someone still waits
for: one whose caller gave up keeps no slot); the worker takes the first waiting request,
then keeps collecting for at most ``max_wait_s`` (or until ``max_batch_size``), and decides them
together. A failure inside a batch fails only the request at fault: the batch is retried request
by request, so one bad request never fails or stalls the others.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from decision.errors import DecisionError, DecodeAbandonedError
from decision.serve.metrics import ServiceMetrics

log = logging.getLogger("decision.serve.worker")


class BatchEngine(Protocol):
    """Anything that decides a list of prepared requests at once, one result per request.

    A result may be an ``Exception`` instance: that request alone failed. An engine whose
    ``decide_many`` takes an ``abandoned`` keyword gets ``abandoned(i)``: whether request ``i``'s
    caller has given up (timed out), so it can stop decoding work nobody waits for (raising
    ``DecodeAbandonedError`` once every request of the batch is abandoned).
    """

    def decide_many(self, requests: Sequence[Any]) -> Sequence[Any]: ...


class QueueFullError(DecisionError):
    """The queue holds ``queue_size`` requests already; the service answers 429."""


class WorkerStoppedError(DecisionError):
    """The worker is not running (shutting down or never started); the service answers 503."""


class RequestExpiredError(DecisionError):
    """A request's deadline passed before its batch started; it was never decided."""


@dataclass
class WorkItem:
    """One request waiting for the worker, with the future its caller waits on."""

    payload: Any
    deadline: float
    enqueued_at: float = field(default_factory=time.monotonic)
    future: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)
    started_at: float | None = None
    given_up: bool = False  # set by the caller that stopped waiting (``abandon``)

    def abandon(self) -> None:
        """The caller stopped waiting (timed out, cancelled): stop decoding it if it runs."""
        self.given_up = True

    @property
    def abandoned(self) -> bool:
        return self.given_up or time.monotonic() > self.deadline


_STOP = object()

_GIVEN_UP_DECIDED = "the request was given up while decided"


def _gone(item: WorkItem) -> bool:
    """Nobody waits for ``item`` any more: its caller gave up, timed out or cancelled it."""
    return item.abandoned or item.future.done()


def _fail(item: WorkItem, error: Exception) -> None:
    """Answer a request that will not be decided (a no-op when its future was cancelled)."""
    if item.future.set_running_or_notify_cancel():
        item.future.set_exception(error)


class _RequestQueue:
    """FIFO of ``WorkItem``s (and the stop marker) bounded by the *live* requests only.

    Why not ``queue.Queue``: a request whose caller gave up (timed out, disconnected) held its
    slot there until the worker reached it, so a worker busy with a long batch answered new
    clients 429 while nobody waited. Here such requests are dropped when the queue is full, and
    ``live`` counts only the others. The stop marker takes no slot.
    """

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._items: deque[Any] = deque()
        self._ready = threading.Condition()

    def put_nowait(self, item: WorkItem) -> None:
        """Append ``item``; raise ``queue.Full`` when ``maxsize`` live requests wait already."""
        with self._ready:
            count = self._count()
            dropped = self._drop_gone() if count >= self.maxsize else []
            full = count - len(dropped) >= self.maxsize
            if not full:
                self._items.append(item)
                self._ready.notify()
        for gone in dropped:  # outside the lock: resolving runs the future's callbacks
            _fail(gone, RequestExpiredError("the request was given up while waiting in the queue"))
        if full:
            raise queue.Full

    def put_stop(self) -> None:
        """Append the stop marker: the worker decides what is queued before it, then exits."""
        with self._ready:
            self._items.append(_STOP)
            self._ready.notify()

    def get(self, timeout: float | None = None) -> Any:
        """The first item (or the stop marker); ``queue.Empty`` after ``timeout`` seconds."""
        with self._ready:
            if not self._ready.wait_for(lambda: bool(self._items), timeout):
                raise queue.Empty
            return self._items.popleft()

    def drain(self) -> list[WorkItem]:
        """Take every waiting request out. The stop marker stays: a worker still finishing its
        batch must still see it."""
        with self._ready:
            items = [item for item in self._items if item is not _STOP]
            self._items = deque(item for item in self._items if item is _STOP)
        return items

    @property
    def live(self) -> int:
        """Requests waiting that someone still waits for."""
        with self._ready:
            return sum(1 for item in self._items if item is not _STOP and not _gone(item))

    def _count(self) -> int:
        return sum(1 for item in self._items if item is not _STOP)

    def _drop_gone(self) -> list[WorkItem]:
        """Remove the given-up requests (the lock held); returns them to be answered."""
        kept: deque[Any] = deque()
        dropped: list[WorkItem] = []
        for item in self._items:
            (dropped if item is not _STOP and _gone(item) else kept).append(item)
        self._items = kept
        return dropped


def _takes_keyword(function: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(function).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False


class BatchWorker:
    """Runs ``engine.decide_many`` on batches of queued requests in one background thread."""

    def __init__(
        self,
        engine: BatchEngine,
        *,
        max_batch_size: int = 16,
        max_wait_s: float = 0.005,
        queue_size: int = 256,
        metrics: ServiceMetrics | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be at least 1")
        if queue_size < 1:
            raise ValueError("queue_size must be at least 1")
        if not (math.isfinite(max_wait_s) and max_wait_s >= 0):
            # inf would reach queue.get as a timeout it cannot take (OverflowError), killing
            # the worker thread with a request in hand; NaN is no wait at all
            raise ValueError(f"max_wait_s must be a finite number >= 0, got {max_wait_s!r}")
        self.engine = engine
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.metrics = metrics
        self._queue = _RequestQueue(queue_size)
        self._thread: threading.Thread | None = None
        self._accepting = False
        self._takes_abandoned = _takes_keyword(engine.decide_many, "abandoned")

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker thread (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._accepting = True
        self._thread = threading.Thread(target=self._run, name="decision-worker", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Refuse new requests, decide those already queued (within ``timeout``), then fail
        whatever still waits, so no caller waits forever."""
        self._accepting = False
        thread = self._thread
        if thread is None:
            return
        self._queue.put_stop()  # takes no slot: gets in even when the queue is full
        thread.join(timeout)
        self._fail_waiting(WorkerStoppedError("the service is shutting down"))
        self._thread = None

    def close(self) -> None:
        """Refuse new requests and fail those still queued (``WorkerStoppedError``) at once; the
        batch being decided finishes. The start of a shutdown, before ``stop``."""
        self._accepting = False
        self._fail_waiting(WorkerStoppedError("the service is shutting down"))

    @property
    def alive(self) -> bool:
        return self._accepting and self._thread is not None and self._thread.is_alive()

    @property
    def depth(self) -> int:
        """Requests waiting in the queue that someone still waits for (not counting the batch
        being decided, nor requests whose caller gave up)."""
        return self._queue.live

    # -- submitting --------------------------------------------------------------------------

    def submit(self, payload: Any, timeout_s: float) -> concurrent.futures.Future[Any]:
        """Queue one prepared request; the future resolves to its result or raises its error.

        Raises ``QueueFullError`` at once when ``queue_size`` live requests wait already (no
        waiting: overload is reported to the client, who may retry; requests whose caller gave
        up are dropped to make room first) and ``WorkerStoppedError`` when not running.
        """
        return self.enqueue(payload, timeout_s).future

    def enqueue(self, payload: Any, timeout_s: float) -> WorkItem:
        """``submit``, returning the queued item (its ``started_at`` tells the queue wait)."""
        if not self.alive:
            raise WorkerStoppedError("the decision worker is not running")
        item = WorkItem(payload=payload, deadline=time.monotonic() + timeout_s)
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            raise QueueFullError(
                f"the request queue is full ({self._queue.maxsize} waiting); retry later"
            ) from None
        return item

    # -- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            batch, stop = self._collect()
            if batch:
                self._execute(batch)
            if stop:
                return

    def _collect(self) -> tuple[list[WorkItem], bool]:
        """Block for one request, then gather more for at most ``max_wait_s``."""
        first = self._take(None)
        if first is _STOP:
            return [], True
        batch: list[WorkItem] = [first]
        until = time.monotonic() + self.max_wait_s
        while len(batch) < self.max_batch_size:
            try:
                item = self._take(until)
            except queue.Empty:
                break
            if item is _STOP:
                return self._claim(batch), True
            batch.append(item)
        return self._claim(batch), False

    def _take(self, until: float | None) -> Any:
        """The next queued request whose caller still waits, or the stop marker; waits until
        ``until`` (None: for ever), then raises ``queue.Empty``. Past ``until`` it still takes
        what is already queued: under load batches fill up without waiting at all. Requests
        given up on the way are answered here: they would take the place of live ones in the
        batch (one of ``max_batch_size`` requests, most of them gone, decided a few)."""
        while True:
            if until is None:
                item = self._queue.get()
            else:
                remaining = until - time.monotonic()
                # a huge wait is capped at the longest timeout a lock takes (about 292 years)
                item = self._queue.get(timeout=min(remaining, threading.TIMEOUT_MAX)
                                       if remaining > 0 else 0)
            if item is _STOP or not _gone(item):
                return item
            _fail(item, RequestExpiredError("the request was given up while waiting in the queue"))

    def _claim(self, batch: list[WorkItem]) -> list[WorkItem]:
        """Drop requests whose caller gave up (cancelled) or whose deadline passed."""
        now = time.monotonic()
        live: list[WorkItem] = []
        for item in batch:
            if not item.future.set_running_or_notify_cancel():
                continue  # the caller cancelled (timed out); never decide it
            if now > item.deadline or item.given_up:
                item.future.set_exception(
                    RequestExpiredError("the request timed out while waiting in the queue")
                )
                continue
            item.started_at = now
            if self.metrics is not None:
                self.metrics.queue_wait.observe(now - item.enqueued_at)
            live.append(item)
        return live

    def _execute(self, batch: list[WorkItem]) -> None:
        if not batch:
            return
        try:
            results = self._decide_many(batch)
            if len(results) != len(batch):
                raise RuntimeError(
                    f"engine returned {len(results)} results for {len(batch)} requests"
                )
        except DecodeAbandonedError:
            # every caller of the batch gave up: it was stopped, nothing to retry or answer
            log.info("batch of %d abandoned by its callers; decoding stopped", len(batch))
            for item in batch:
                self._resolve(item, RequestExpiredError(_GIVEN_UP_DECIDED))
            return
        except Exception as exc:  # noqa: BLE001 - isolate the request at fault, below
            if len(batch) == 1:
                log.warning("request failed in the worker: %s", exc)
                self._resolve(batch[0], exc)
                return
            log.warning("batch of %d failed (%s); retrying one by one", len(batch), exc)
            for item in batch:
                if item.abandoned:  # its caller left while the batch ran: decided for nobody
                    self._resolve(item, RequestExpiredError(_GIVEN_UP_DECIDED))
                else:
                    self._execute([item])
            return
        for item, result in zip(batch, results, strict=True):
            if item.abandoned and not isinstance(result, BaseException):
                # given up while decided: its rows may have been fixed at once, without forwards,
                # so the result is neither an answer to deliver (if its caller has not yet seen
                # its timeout) nor a sample of decoding for the step metrics
                result = RequestExpiredError(_GIVEN_UP_DECIDED)
            self._resolve(item, result)

    def _decide_many(self, batch: list[WorkItem]) -> list[Any]:
        """One ``engine.decide_many`` call on ``batch``, timed into the batch metrics whether it
        returns or raises (a failed batch and its one-by-one retries are calls too)."""
        start = time.monotonic()
        try:
            payloads = [item.payload for item in batch]
            if not self._takes_abandoned:
                return list(self.engine.decide_many(payloads))

            def abandoned(i: int) -> bool:
                return batch[i].abandoned

            return list(self.engine.decide_many(payloads, abandoned=abandoned))
        finally:
            if self.metrics is not None:
                self.metrics.batch_size.observe(len(batch))
                self.metrics.batch_seconds.observe(time.monotonic() - start)

    def _resolve(self, item: WorkItem, result: Any) -> None:
        if isinstance(result, BaseException):
            item.future.set_exception(result)
            return
        if self.metrics is not None:
            steps = getattr(result, "steps", None)
            tpf = getattr(result, "tokens_per_forward", None)
            if steps is not None:
                self.metrics.steps.observe(float(steps))
            if tpf is not None:
                self.metrics.tokens_per_forward.observe(float(tpf))
        item.future.set_result(result)

    def _fail_waiting(self, error: Exception) -> None:
        """Answer every waiting request ``error`` (the stop marker stays queued)."""
        for item in self._queue.drain():
            _fail(item, error)
