"""The batching worker alone, with a recording engine: batching, isolation of failures, overload,
deadlines, shutdown."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest

from decision.serve.metrics import ServiceMetrics
from decision.serve.settings import ServeSettings
from decision.serve.worker import (
    BatchWorker,
    QueueFullError,
    RequestExpiredError,
    WorkerStoppedError,
)


class RecordingEngine:
    """Doubles each int; raises for the value -1 (the request at fault); records batch sizes.

    ``gate`` lets a test hold the worker inside ``decide_many`` until it opens it.
    """

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def decide_many(self, requests: Sequence[int]) -> list[int]:
        self.entered.set()
        self.gate.wait(10)
        self.batches.append(list(requests))
        if -1 in requests:
            raise ValueError("bad request -1")
        return [2 * r for r in requests]


def _metrics() -> ServiceMetrics:
    return ServiceMetrics(queue_depth=lambda: 0.0, model_loaded=lambda: 1.0)


@contextmanager
def _held_worker(
    engine: RecordingEngine, first: int = 0, **settings: Any
) -> Iterator[tuple[BatchWorker, Future[Any]]]:
    """A started worker held inside ``decide_many`` on request ``first`` (the engine's gate
    closed) until the test opens the gate; stopped on exit."""
    worker = BatchWorker(engine, **settings)
    worker.start()
    try:
        engine.gate.clear()
        held = worker.submit(first, timeout_s=10)
        assert engine.entered.wait(5)
        yield worker, held
    finally:
        worker.stop()


def test_requests_waiting_together_are_batched() -> None:
    engine = RecordingEngine()
    metrics = _metrics()
    # the worker is busy with request 0 alone
    with _held_worker(engine, max_batch_size=4, max_wait_s=0.05, queue_size=64,
                      metrics=metrics) as (worker, first):
        futures = [worker.submit(i, timeout_s=10) for i in range(1, 10)]
        engine.gate.set()
        assert first.result(5) == 0
        assert [f.result(5) for f in futures] == [2 * i for i in range(1, 10)]
    sizes = [len(b) for b in engine.batches]
    assert sizes[0] == 1
    assert max(sizes) == 4  # capped by max_batch_size
    assert sum(sizes) == 10
    assert metrics.batch_size.count() == len(sizes)
    # order inside the queue is kept
    assert [r for b in engine.batches for r in b] == list(range(10))


def test_failure_in_a_batch_fails_only_the_request_at_fault() -> None:
    engine = RecordingEngine()
    with _held_worker(engine, 100, max_batch_size=8, max_wait_s=0.05,
                      queue_size=64) as (worker, blocker):
        futures = [worker.submit(i, timeout_s=10) for i in (1, 2, -1, 3)]
        engine.gate.set()
        assert blocker.result(5) == 200
        assert futures[0].result(5) == 2
        assert futures[1].result(5) == 4
        with pytest.raises(ValueError, match="bad request -1"):
            futures[2].result(5)
        assert futures[3].result(5) == 6
        # after the failure the worker still answers
        assert worker.submit(7, timeout_s=5).result(5) == 14
    assert [1, 2, -1, 3] in engine.batches  # tried together first, then one by one
    assert [-1] in engine.batches and [3] in engine.batches


def _waits_made_by(call: Callable[[], Any]) -> list[str]:
    """Run ``call`` in this thread and name the waits it made: ``time.sleep`` and threading's
    waits (``Condition.wait`` / ``wait_for``, under ``Event.wait`` and ``queue.Queue``'s too)."""
    waits = {threading.Condition.wait.__code__: "Condition.wait",
             threading.Condition.wait_for.__code__: "Condition.wait_for"}
    made: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in waits:
            made.append(waits[frame.f_code])
        elif event == "c_call" and arg is time.sleep:
            made.append("time.sleep")

    previous = sys.getprofile()
    sys.setprofile(profile)  # this thread only
    try:
        call()
    finally:
        sys.setprofile(previous)
    return made


def test_full_queue_is_refused_at_once() -> None:
    engine = RecordingEngine()
    with _held_worker(engine, max_batch_size=1, max_wait_s=0.0, queue_size=2) as (worker, _):
        worker.submit(1, timeout_s=10)
        worker.submit(2, timeout_s=10)

        def third() -> None:
            with pytest.raises(QueueFullError, match="queue is full"):
                worker.submit(3, timeout_s=30)

        # "at once": refused without waiting at all (no sleep, no wait on a condition), while
        # the worker is still held (nothing decided, the queue as it was). A submit that
        # waited for a slot would have got one once the engine's gate timed out (10 s, within
        # the request's 30 s) and been queued, not refused.
        assert _waits_made_by(third) == []
        assert not engine.gate.is_set() and engine.batches == [] and worker.depth == 2
        engine.gate.set()


def test_expired_and_cancelled_requests_are_never_decided() -> None:
    engine = RecordingEngine()
    with _held_worker(engine, max_batch_size=8, max_wait_s=0.0, queue_size=8) as (worker, _):
        expired = worker.submit(5, timeout_s=0.01)
        cancelled = worker.submit(6, timeout_s=10)
        assert cancelled.cancel()
        live = worker.submit(7, timeout_s=10)
        time.sleep(0.05)
        engine.gate.set()
        assert live.result(5) == 14
        with pytest.raises(RequestExpiredError):
            expired.result(5)
    decided = [r for b in engine.batches for r in b]
    assert 5 not in decided and 6 not in decided


def test_stop_drains_the_queue_and_refuses_new_requests() -> None:
    engine = RecordingEngine()
    worker = BatchWorker(engine, max_batch_size=1, max_wait_s=0.0, queue_size=8)
    worker.start()
    engine.gate.clear()
    running = worker.submit(0, timeout_s=10)
    assert engine.entered.wait(5)
    waiting = worker.submit(1, timeout_s=10)
    stopper = threading.Thread(target=worker.stop)
    stopper.start()
    time.sleep(0.05)
    engine.gate.set()
    stopper.join(5)
    assert running.result(5) == 0
    assert waiting.result(5) == 2  # queued before the stop: still decided
    assert not worker.alive
    with pytest.raises(WorkerStoppedError):
        worker.submit(2, timeout_s=1)


def test_bad_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="max_batch_size"):
        BatchWorker(RecordingEngine(), max_batch_size=0)
    with pytest.raises(ValueError, match="queue_size"):
        BatchWorker(RecordingEngine(), queue_size=0)
    with pytest.raises(ValueError, match="max_wait_s"):
        BatchWorker(RecordingEngine(), max_wait_s=float("inf"))
    with pytest.raises(ValueError, match="max_wait_ms"):
        ServeSettings(max_wait_ms=float("inf"))


def test_a_very_long_max_wait_still_collects_and_decides() -> None:
    # 1e10 s is past the longest timeout a lock takes: passed on as is, queue.get raised
    # OverflowError in the worker thread, which died holding the first request.
    engine = RecordingEngine()
    worker = BatchWorker(engine, max_batch_size=2, max_wait_s=1e10, queue_size=8)
    worker.start()
    try:
        first = worker.submit(1, timeout_s=10)
        time.sleep(0.2)  # the worker holds request 1 and waits for a second one
        second = worker.submit(2, timeout_s=10)
        assert first.result(5) == 2 and second.result(5) == 4
        assert worker.alive
    finally:
        worker.stop(timeout=2)
    assert engine.batches == [[1, 2]]


class StepEngine:
    """Decodes in 10 ms steps, up to ``steps`` of them; asks ``abandoned`` before each, as
    the model's ``decide_many`` does, and stops once every request of the batch is given up."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.taken: list[int] = []

    def decide_many(self, requests: Sequence[int], abandoned=None) -> list[int]:
        from decision.errors import DecodeAbandonedError

        for step in range(self.steps):
            if abandoned is not None and all(abandoned(i) for i in range(len(requests))):
                self.taken.append(step)
                raise DecodeAbandonedError("every request of the batch was abandoned")
            time.sleep(0.01)
        self.taken.append(self.steps)
        return [2 * r for r in requests]


def test_a_request_whose_caller_gave_up_stops_holding_the_worker() -> None:
    # A request that outlives its deadline (or whose caller abandons it) while it is decoded
    # used to be decoded to the end: one long request answered 504 kept the worker busy for
    # minutes, and every request behind it timed out too.
    engine = StepEngine(steps=1000)  # 10 s of decoding
    worker = BatchWorker(engine, max_batch_size=1, max_wait_s=0.0, queue_size=8)
    worker.start()
    try:
        slow = worker.submit(1, timeout_s=0.2)
        with pytest.raises(RequestExpiredError):
            slow.result(5)
        # the worker is free again: had it decoded request 1 to its end (10 s), the wait for
        # it above would have timed out, request 2 would expire in the queue, and
        # engine.taken[0] (below) would be 1000
        engine.steps = 1
        assert worker.submit(2, timeout_s=5).result(5) == 4
        engine.steps = 1000
        item = worker.enqueue(3, timeout_s=30)
        time.sleep(0.1)
        item.abandon()  # the caller went away before its deadline
        with pytest.raises(RequestExpiredError):
            item.future.result(5)
    finally:
        worker.stop(timeout=2)
    assert engine.taken[0] < 100 and engine.taken[-1] < 100


def test_requests_whose_caller_gave_up_keep_no_queue_slot() -> None:
    # A request whose caller timed out or disconnected used to keep its slot until the worker
    # reached it: with the worker busy on a long batch, new clients got 429 (and /health a
    # queue depth) while nobody waited.
    engine = RecordingEngine()
    with _held_worker(engine, max_batch_size=1, max_wait_s=0.0, queue_size=2) as (worker, _):
        disconnected = worker.enqueue(1, timeout_s=10)
        expired = worker.enqueue(2, timeout_s=0.01)
        assert worker.depth == 2
        disconnected.abandon()
        time.sleep(0.05)  # request 2 outlives its deadline
        assert worker.depth == 0
        fresh = [worker.submit(i, timeout_s=10) for i in (3, 4)]  # room made for both
        assert worker.depth == 2
        with pytest.raises(QueueFullError):
            worker.submit(5, timeout_s=10)  # the live ones still count
        for gone in (disconnected, expired):  # dropped and answered, never decided
            with pytest.raises(RequestExpiredError):
                gone.future.result(5)
        engine.gate.set()
        assert [f.result(5) for f in fresh] == [6, 8]
    decided = [r for b in engine.batches for r in b]
    assert 1 not in decided and 2 not in decided


def test_a_cancelled_future_keeps_no_queue_slot() -> None:
    engine = RecordingEngine()
    with _held_worker(engine, max_batch_size=1, max_wait_s=0.0, queue_size=1) as (worker, _):
        assert worker.submit(1, timeout_s=10).cancel()
        assert worker.depth == 0
        live = worker.submit(2, timeout_s=10)
        engine.gate.set()
        assert live.result(5) == 4


def test_every_decide_many_call_is_in_the_batch_metrics() -> None:
    # A batch that raised (and was retried one by one) was left out of decision_batch_size and
    # decision_batch_seconds: only the calls that returned were observed.
    engine = RecordingEngine()
    metrics = _metrics()
    with _held_worker(engine, 100, max_batch_size=8, max_wait_s=0.05, queue_size=64,
                      metrics=metrics) as (worker, blocker):
        futures = [worker.submit(i, timeout_s=10) for i in (1, -1, 2)]
        engine.gate.set()
        assert blocker.result(5) == 200
        for future in futures:
            future.exception(5)
    assert [1, -1, 2] in engine.batches and [-1] in engine.batches
    calls = len(engine.batches)  # [100], [1, -1, 2], [1], [-1], [2]
    assert metrics.batch_size.count() == calls
    assert metrics.batch_seconds.count() == calls
    size_sum = sum(len(b) for b in engine.batches)  # 1 + 3 + 1 + 1 + 1
    assert f"decision_batch_size_sum {size_sum}\n" in metrics.render()


class StatsEngine(RecordingEngine):
    """``RecordingEngine`` whose results carry decode statistics, as a ``Decision`` does."""

    def decide_many(self, requests: Sequence[int]) -> list[Any]:  # type: ignore[override]
        return [SimpleNamespace(value=v, steps=v, tokens_per_forward=float(v))
                for v in super().decide_many(requests)]


def test_a_request_given_up_while_decided_is_no_answer_nor_a_metrics_sample() -> None:
    # A request abandoned while its batch was decoded (its client left, its deadline passed) has
    # its rows fixed at once, without forwards: its result was still delivered (a 200 of forced
    # answers when the worker beat the caller's timeout) and observed, so one 504 of 800 tokens
    # fixed after 2 steps put 400 into decision_tokens_per_forward.
    engine = StatsEngine()
    metrics = _metrics()
    worker = BatchWorker(engine, max_batch_size=4, max_wait_s=0.05, queue_size=8,
                         metrics=metrics)
    worker.start()
    try:
        engine.gate.clear()
        left = worker.enqueue(1, timeout_s=10)
        expired = worker.enqueue(2, timeout_s=0.3)
        stayed = worker.enqueue(3, timeout_s=10)
        assert engine.entered.wait(5)
        left.abandon()
        time.sleep(0.4)  # request 2 outlives its deadline while decided
        engine.gate.set()
        assert stayed.future.result(5).value == 6
        for gone in (left, expired):
            with pytest.raises(RequestExpiredError):
                gone.future.result(5)
    finally:
        worker.stop()
    assert engine.batches == [[1, 2, 3]]
    assert metrics.steps.count() == 1 and metrics.tokens_per_forward.count() == 1
    assert "decision_tokens_per_forward_sum 6\n" in metrics.render()


def test_requests_given_up_in_the_queue_take_no_place_in_a_batch() -> None:
    # The worker took max_batch_size requests off the queue, given-up ones included, and only
    # then dropped those: under overload, when many callers time out, batches shrank to the few
    # live requests among them while the others waited for the next batch.
    engine = RecordingEngine()
    with _held_worker(engine, 100, max_batch_size=2, max_wait_s=0.0,
                      queue_size=8) as (worker, blocker):
        gone = worker.enqueue(1, timeout_s=10)
        live = [worker.submit(i, timeout_s=10) for i in (2, 3)]
        gone.abandon()
        engine.gate.set()
        assert blocker.result(5) == 200
        assert [f.result(5) for f in live] == [4, 6]
        with pytest.raises(RequestExpiredError):
            gone.future.result(5)
    assert engine.batches == [[100], [2, 3]]


def test_a_failed_batch_is_not_retried_for_requests_given_up_meanwhile() -> None:
    # After a batch failed, each of its requests was decided again alone, those whose caller had
    # gone while the batch ran too: decoded (the model's prefill at least) for nobody.
    class Leaving(RecordingEngine):
        left: Any = None

        def decide_many(self, requests: Sequence[int]) -> list[int]:
            if len(requests) > 1:
                self.left.abandon()  # its client goes away while the batch is decided
            return super().decide_many(requests)

    engine = Leaving()
    with _held_worker(engine, 100, max_batch_size=4, max_wait_s=0.0,
                      queue_size=8) as (worker, blocker):
        engine.left = worker.enqueue(1, timeout_s=10)
        bad, good = (worker.submit(i, timeout_s=10) for i in (-1, 2))
        engine.gate.set()
        assert blocker.result(5) == 200
        assert good.result(5) == 4
        with pytest.raises(ValueError):
            bad.result(5)
        with pytest.raises(RequestExpiredError):
            engine.left.future.result(5)
    assert engine.batches == [[100], [1, -1, 2], [-1], [2]]


def test_a_deadline_that_passes_while_the_batch_collects_is_not_decided() -> None:
    """The worker took the request in time, then waited ``max_wait_s`` for company: by the time
    the batch starts its deadline has passed, and it is answered expired, never decided."""
    engine = RecordingEngine()
    worker = BatchWorker(engine, max_batch_size=8, max_wait_s=0.4, queue_size=8)
    worker.start()
    try:
        late = worker.submit(5, timeout_s=0.1)
        with pytest.raises(RequestExpiredError):
            late.result(5)
        assert worker.submit(6, timeout_s=10).result(5) == 12
    finally:
        worker.stop()
    assert 5 not in [r for b in engine.batches for r in b]


class _OneTooMany(RecordingEngine):
    """Returns an extra result for a batch holding 3: a broken engine."""

    def decide_many(self, requests: Sequence[int]) -> list[int]:
        results = super().decide_many(requests)
        return results + [0] if 3 in requests else results


def test_an_engine_returning_too_many_results_fails_the_request_not_the_worker() -> None:
    engine = _OneTooMany()
    worker = BatchWorker(engine, max_batch_size=1, max_wait_s=0.0, queue_size=8)
    worker.start()
    try:
        with pytest.raises(RuntimeError, match="2 results for 1 requests"):
            worker.submit(3, timeout_s=10).result(5)
        assert worker.submit(4, timeout_s=10).result(5) == 8  # the worker thread lives on
    finally:
        worker.stop()


def test_a_stop_that_arrives_while_a_batch_collects_still_decides_it() -> None:
    engine = RecordingEngine()
    worker = BatchWorker(engine, max_batch_size=8, max_wait_s=5.0, queue_size=8)
    worker.start()
    taken = worker.submit(1, timeout_s=30)
    worker.stop(timeout=10)
    assert taken.result(0) == 2  # decided before the stop returned, not left waiting


def test_a_stop_that_times_out_still_ends_the_thread_after_its_batch() -> None:
    """``stop`` gave up waiting on a long batch and failed the queued requests: the stop marker
    must stay queued, or the thread, once its batch ends, waits for requests for ever."""
    engine = RecordingEngine()
    with _held_worker(engine, max_batch_size=1, max_wait_s=0.0, queue_size=8) as (worker, held):
        thread = worker._thread
        assert thread is not None
        waiting = worker.submit(1, timeout_s=10)
        worker.stop(timeout=0.05)
        with pytest.raises(WorkerStoppedError):
            waiting.result(1)
        engine.gate.set()
        assert held.result(5) == 0
        thread.join(5)
        assert not thread.is_alive()
