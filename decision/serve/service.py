"""The service object behind the routes: validate, enqueue, wait, and map failures to HTTP errors.

Demo apps reach it from their own routes with a ``ServiceDep`` parameter and call
``await service.decide(body)``, so their decisions go through the same worker and batches.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Annotated, Any, Protocol

import anyio
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


# Threads that validate and compile requests at once. Their own limiter, not anyio's default
# one: sync routes hold tokens of that one while they wait on ``decide`` (a Xiangqi model move,
# ``ServiceModel``), so sharing it would deadlock once every token is held by such a route.
PREPARE_THREADS = 4


class DecisionService:
    """Holds the engine, the worker and the metrics of one app."""

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        self.engine: ServiceEngine | None = None
        self.worker: BatchWorker | None = None
        self._prepare_limiter: anyio.CapacityLimiter | None = None  # made on the event loop
        self.shutting_down = False
        self.metrics = ServiceMetrics(
            queue_depth=lambda: float(self.worker.depth) if self.worker else 0.0,
            model_loaded=lambda: 1.0 if self.ready else 0.0,
        )

    @property
    def ready(self) -> bool:
        return self.engine is not None and self.worker is not None and self.worker.alive

    def start(self, engine: ServiceEngine) -> None:
        """Attach a loaded engine and start the worker that owns it."""
        s = self.settings
        self.engine = engine
        self.worker = BatchWorker(
            engine,
            max_batch_size=s.max_batch_size,
            max_wait_s=s.max_wait_ms / 1000.0,
            queue_size=s.queue_size,
            metrics=self.metrics,
        )
        self.worker.start()

    def begin_shutdown(self) -> None:
        """The server is shutting down: answer the queued requests 503 now, refuse new ones, and
        let the batch in progress finish (``decision serve`` calls this when shutdown begins;
        ``stop`` follows at the end of the lifespan)."""
        self.shutting_down = True
        if self.worker is not None:
            self.worker.close()

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()

    async def decide(self, body: DecideBody, request: Request | None = None) -> DecideResponse:
        """Answer one request through the worker; raise ``ServiceError`` or
        ``DecisionInputError`` (mapped to JSON errors by the app's handlers). With the HTTP
        ``request``, a client that disconnects abandons its decision: it is not decoded on."""
        if not self.ready or self.engine is None or self.worker is None:
            raise ServiceError(503, "unavailable", "the model is not loaded")
        engine, worker = self.engine, self.worker
        arrived = time.monotonic()
        timeout = self.settings.request_timeout_s
        check_unique_ids(body)
        # Validation and schema compilation can take milliseconds (regex -> automaton): done in a
        # thread, so the event loop keeps serving, and before enqueueing, so bad input never
        # reaches (or stalls) the worker.
        if self._prepare_limiter is None:
            self._prepare_limiter = anyio.CapacityLimiter(PREPARE_THREADS)
        prepared = await anyio.to_thread.run_sync(engine.prepare, body,
                                                  limiter=self._prepare_limiter)
        prepared_at = time.monotonic()
        try:
            item = worker.enqueue(prepared, timeout - (prepared_at - arrived))
        except QueueFullError as exc:
            raise ServiceError(429, "overloaded", str(exc)) from None
        except WorkerStoppedError as exc:
            raise ServiceError(503, "unavailable", str(exc)) from None
        remaining = max(0.0, timeout - (time.monotonic() - arrived))
        watch = (
            asyncio.ensure_future(_abandon_on_disconnect(request, item))
            if request is not None else None
        )
        try:
            decision = await asyncio.wait_for(asyncio.wrap_future(item.future), remaining)
        except (TimeoutError, RequestExpiredError):
            raise ServiceError(
                504, "timeout", f"the request did not finish within {timeout:g} s"
            ) from None
        except WorkerStoppedError as exc:
            raise ServiceError(503, "unavailable", str(exc)) from None
        except asyncio.CancelledError:
            if not self.shutting_down:
                raise
            # the server's graceful-shutdown time ran out and it cancelled the request: answer
            # it (a JSON 503, not a bare 500), and the finally below stops its decoding
            raise ServiceError(
                503, "unavailable", "the service shut down before the request was decided"
            ) from None
        finally:
            if watch is not None:
                watch.cancel()
            if not item.future.done():
                item.abandon()  # nobody waits for it now: the worker stops decoding it
        done = time.monotonic()
        started = item.started_at if item.started_at is not None else item.enqueued_at
        extra = {
            "prepare_ms": (prepared_at - arrived) * 1000.0,
            "queue_ms": (started - item.enqueued_at) * 1000.0,
            "total_ms": (done - arrived) * 1000.0,
        }
        return to_response(decision, engine.name, extra)


async def _abandon_on_disconnect(request: Request, item: WorkItem) -> None:
    """Abandon ``item`` when the client goes away. The body has been read: the next message the
    server sends is ``http.disconnect``, when the client disconnects or the response is done."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            item.abandon()
            return


def get_service(request: Request) -> DecisionService:
    """FastAPI dependency giving a route the app's ``DecisionService``."""
    service: DecisionService = request.app.state.service
    return service


ServiceDep = Annotated[DecisionService, Depends(get_service)]
