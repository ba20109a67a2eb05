"""The service object behind the routes: validate, enqueue, wait, and map failures to HTTP errors.

Demo apps reach it from their own routes with a ``ServiceDep`` parameter and call
``await service.decide(body)``, so their decisions go through the same worker and batches.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
import time
from collections.abc import Sequence
from typing import Annotated, Any, Protocol

from fastapi import Depends, Request

from decision.serve.api import AnswerOut, DecideBody, DecideResponse, ModelInfo, check_unique_ids
from decision.serve.errors import ServiceError
from decision.serve.metrics import ServiceMetrics
from decision.serve.settings import ServeSettings
from decision.serve.worker import (
    BatchWorker,
    QueueFullError,
    RequestExpiredError,
    WorkerStoppedError,
    WorkItem,
)


class ServiceEngine(Protocol):
    """What the service needs from a model: validation up front, then batched decisions."""

    name: str

    def prepare(self, body: DecideBody) -> Any:
        """Validate ``body`` against the model and compile its schemas; raise
        ``DecisionInputError`` for bad input. Runs outside the worker, before enqueueing."""
        ...

    def decide_many(self, prepared: Sequence[Any]) -> Sequence[Any]:
        """Decide prepared requests together; one ``Decision`` (or exception) per request."""
        ...

    def info(self) -> ModelInfo: ...


def to_response(decision: Any, model_name: str, extra_ms: dict[str, float]) -> DecideResponse:
    """Turn a decoder ``Decision`` into the response body (attribute names per interfaces.md)."""
    answers = [
        AnswerOut(
            id=a.id,
            value=a.value,
            text=a.text,
            confidence=float(a.confidence),
            option_probabilities=(
                {str(k): float(v) for k, v in a.option_probabilities.items()}
                if a.option_probabilities is not None
                else None
            ),
        )
        for a in decision.answers
    ]
    timings = {str(k): float(v) for k, v in (decision.timings or {}).items()}
    timings.update(extra_ms)
    return DecideResponse(
        model=model_name,
        mode=decision.mode,
        answers=answers,
        steps=int(decision.steps),
        tokens_per_forward=float(decision.tokens_per_forward),
        timings=timings,
    )


# Threads that validate and compile requests at once. Their own pool, not anyio's default
# limiter: sync routes hold tokens of that one while they wait on ``decide`` (a Xiangqi model move,
# ``ServiceModel``), so sharing it would deadlock once every token is held by such a route. A
# pool rather than a limiter also keeps the bound when a request stops waiting on its thread
# (timeout, shutdown): the thread stays busy, and counted, until its compile is over.
PREPARE_THREADS = 4

_SHUTDOWN_MESSAGE = "the service shut down before the request was decided"


class DecisionService:
    """Holds the engine, the worker and the metrics of one app."""

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        self.engine: ServiceEngine | None = None
        self.worker: BatchWorker | None = None
        self._prepare_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.shutting_down = False
        # set (on the event loop) when shutdown begins: a request being validated then can only
        # be refused, so it is answered 503 at once (``_until``)
        self._stopping: asyncio.Event | None = None
        # validations submitted and not finished (waiting for a thread, or running: one whose
        # request was given up runs on to its end), bounded by --queue-size like the queue
        self._validating = 0
        self._validating_lock = threading.Lock()
        self.metrics = ServiceMetrics(
            queue_depth=lambda: float(self.worker.depth) if self.worker else 0.0,
            model_loaded=lambda: 1.0 if self.ready else 0.0,
        )

    @property
    def ready(self) -> bool:
        return self.engine is not None and self.worker is not None and self.worker.alive

    def start(self, engine: ServiceEngine) -> None:
        """Attach a loaded engine and start the worker that owns it (again after a shutdown:
        a second lifespan of the same service)."""
        s = self.settings
        self.engine = engine
        self.shutting_down = False
        self._stopping = asyncio.Event()
        self._prepare_pool = concurrent.futures.ThreadPoolExecutor(
            PREPARE_THREADS, thread_name_prefix="decision-prepare"
        )
        self.worker = BatchWorker(
            engine,
            max_batch_size=s.max_batch_size,
            max_wait_s=s.max_wait_ms / 1000.0,
            queue_size=s.queue_size,
            metrics=self.metrics,
        )
        self.worker.start()

    def begin_shutdown(self) -> None:
        """The server is shutting down: answer the queued requests, and those still being
        validated (which could only be refused a place in the queue now), 503 now, refuse new
        ones, and let the batch in progress finish (``decision serve`` calls this on the event
        loop when shutdown begins; ``stop`` follows at the end of the lifespan)."""
        self.shutting_down = True
        if self._stopping is not None:
            self._stopping.set()
        if self.worker is not None:
            self.worker.close()

    def stop(self) -> None:
        """Stop the worker and drop the validations not started (a request still waiting on one
        is answered 503)."""
        self.shutting_down = True
        if self.worker is not None:
            self.worker.stop()
        if self._prepare_pool is not None:
            self._prepare_pool.shutdown(wait=False, cancel_futures=True)

    async def decide(self, body: DecideBody, request: Request | None = None) -> DecideResponse:
        """Answer one request through the worker; raise ``ServiceError`` or
        ``DecisionInputError`` (mapped to JSON errors by the app's handlers). With the HTTP
        ``request``, a client that disconnects abandons its decision: it is not decoded on."""
        try:
            return await self._decide(body, request)
        except asyncio.CancelledError:
            if not self.shutting_down:
                raise
            # the server's graceful-shutdown time ran out and it cancelled the request, in
            # validation or in the queue or batch: answer it (a JSON 503, not a bare 500)
            raise ServiceError(503, "unavailable", _SHUTDOWN_MESSAGE) from None

    async def _decide(self, body: DecideBody, request: Request | None) -> DecideResponse:
        """``decide`` itself: validate, enqueue and wait, all within ``--timeout``."""
        if not self.ready or self.engine is None or self.worker is None:
            raise ServiceError(503, "unavailable", "the model is not loaded")
        engine, worker = self.engine, self.worker
        arrived = time.monotonic()
        deadline = arrived + self.settings.request_timeout_s
        check_unique_ids(body)
        # The client may go away at any time from here on, in validation too: a request whose
        # client left is validated no further (never, if it still waits for a thread) nor decoded.
        gone = asyncio.Event()
        watch = (
            asyncio.ensure_future(_watch_disconnect(request, gone))
            if request is not None else None
        )
        try:
            prepared = await self._prepare(engine, body, deadline, gone)
            prepared_at = time.monotonic()
            if prepared_at >= deadline:  # never queue a request nobody will wait for
                raise self._timed_out()
            try:
                item = worker.enqueue(prepared, deadline - prepared_at)
            except QueueFullError as exc:
                raise ServiceError(429, "overloaded", str(exc)) from None
            except WorkerStoppedError as exc:
                raise ServiceError(503, "unavailable", str(exc)) from None
            decision = await self._wait(item, deadline, gone)
        finally:
            if watch is not None:
                watch.cancel()
        done = time.monotonic()
        started = item.started_at if item.started_at is not None else item.enqueued_at
        extra = {
            "prepare_ms": (prepared_at - arrived) * 1000.0,
            "queue_ms": (started - item.enqueued_at) * 1000.0,
            "total_ms": (done - arrived) * 1000.0,
        }
        return to_response(decision, engine.name, extra)

    async def _prepare(
        self, engine: ServiceEngine, body: DecideBody, deadline: float, gone: asyncio.Event
    ) -> Any:
        """``engine.prepare`` on one of the ``PREPARE_THREADS`` threads, within the time left.

        Validation and schema compilation can take milliseconds or seconds (regex -> automaton):
        done in a thread, so the event loop keeps serving, and before enqueueing, so bad input
        never reaches (or stalls) the worker. Past the deadline the request is answered 504 (503
        once shutdown begins; nothing when its client has gone) and its validation dropped:
        never started if it still waited for a thread, else left to finish on its thread with
        its result thrown away.
        """
        pool = self._prepare_pool
        if pool is None:
            raise ServiceError(503, "unavailable", "the model is not loaded")
        limit = self.settings.queue_size
        with self._validating_lock:
            if self._validating >= limit:  # else an unbounded backlog, each answered 504 late
                raise ServiceError(429, "overloaded", f"{self._validating} requests are being "
                                   f"validated (at most {limit}, --queue-size); retry later")
            self._validating += 1
        try:
            future = pool.submit(contextvars.copy_context().run, engine.prepare, body)
        except RuntimeError:  # the pool was shut down: the service is stopping
            self._validation_done()
            raise ServiceError(503, "unavailable", _SHUTDOWN_MESSAGE) from None
        future.add_done_callback(lambda _: self._validation_done())  # finished or cancelled
        try:
            return await _until(asyncio.wrap_future(future), deadline, gone, self._stopping)
        except (TimeoutError, _Gone):
            raise self._timed_out() from None
        except _Stopping:
            raise ServiceError(503, "unavailable", _SHUTDOWN_MESSAGE) from None

    async def _wait(self, item: WorkItem, deadline: float, gone: asyncio.Event) -> Any:
        """Wait for the worker's answer to ``item`` until the deadline; a request whose caller
        stops waiting (timeout, disconnect, cancel) is abandoned, so it is not decoded on."""
        try:
            return await _until(asyncio.wrap_future(item.future), deadline, gone)
        except (TimeoutError, _Gone, RequestExpiredError):
            raise self._timed_out() from None
        except WorkerStoppedError as exc:
            raise ServiceError(503, "unavailable", str(exc)) from None
        finally:
            if not item.future.done():
                item.abandon()  # nobody waits for it now: the worker stops decoding it

    def _validation_done(self) -> None:
        with self._validating_lock:
            self._validating -= 1

    def _timed_out(self) -> ServiceError:
        """The documented 504 of a request that outlived ``--timeout``."""
        timeout = self.settings.request_timeout_s
        return ServiceError(504, "timeout", f"the request did not finish within {timeout:g} s")


class _Gone(Exception):
    """The client disconnected before its answer."""


class _Stopping(Exception):
    """Shutdown began before the awaited work was done."""


async def _until(
    future: asyncio.Future[Any], deadline: float, gone: asyncio.Event,
    stopping: asyncio.Event | None = None,
) -> Any:
    """``future``'s result, unless first the deadline passes (``TimeoutError``), the client goes
    away (``_Gone``) or shutdown begins (``_Stopping``, with ``stopping``). A ``future`` not
    awaited to its end is cancelled (a wrapped ``concurrent.futures.Future`` too, if its work has
    not started)."""
    events = {asyncio.ensure_future(gone.wait()): _Gone}
    if stopping is not None:
        events[asyncio.ensure_future(stopping.wait())] = _Stopping
    try:
        await asyncio.wait([future, *events], timeout=max(0.0, deadline - time.monotonic()),
                           return_when=asyncio.FIRST_COMPLETED)
        if future.done():
            return future.result()
        for event, error in events.items():
            if event.done():
                raise error
        raise TimeoutError
    finally:
        for event in events:
            event.cancel()
        if not future.done():
            future.cancel()


async def _watch_disconnect(request: Request, gone: asyncio.Event) -> None:
    """Set ``gone`` when the client goes away. The body has been read: the next message the
    server sends is ``http.disconnect``, when the client disconnects or the response is done."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            gone.set()
            return


def get_service(request: Request) -> DecisionService:
    """FastAPI dependency giving a route the app's ``DecisionService``."""
    service: DecisionService = request.app.state.service
    return service


ServiceDep = Annotated[DecisionService, Depends(get_service)]
