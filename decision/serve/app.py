"""The FastAPI application: ``create_app(settings)`` builds it; the lifespan loads the model.

Demo apps plug in through ``APP_MODULES`` below: each listed module must expose

- ``router``: a ``fastapi.APIRouter`` with its routes (included as is, with its own prefix);
- optionally ``static_dir``: a ``pathlib.Path`` of static pages, mounted at ``static_url``
  (default ``/apps/<name>``, where ``<name>`` is the module's package, e.g. ``xiangqi``).
- optionally ``check_settings``: a function ``decision serve`` calls before it starts; a
  ``ValueError`` it raises (a bad environment setting of the app) stops the start with its message.

A route that needs the model takes ``service: ServiceDep`` (``decision.serve.service``) and calls
``await service.decide(DecideBody(...))``: its requests share the worker, batches and metrics.
Add a module with one line; list only modules that exist.
"""

from __future__ import annotations

import importlib
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from decision.serve.api import DecideBody, DecideResponse, ErrorBody, HealthBody, ModelsBody
from decision.serve.cross_site import CrossSiteWriteMiddleware
from decision.serve.errors import BodyLimitMiddleware, StaticPages, install_error_handlers
from decision.serve.request_id import install_request_ids
from decision.serve.service import DecisionService, ServiceDep, ServiceEngine
from decision.serve.settings import ServeSettings

log = logging.getLogger("decision.serve")

# Demo-app modules whose ``router`` (and ``static_dir``) the service mounts. One line each.
APP_MODULES: list[str] = [
    "apps.xiangqi.api",  # /api/xiangqi/games and the web board at /xiangqi/
    "apps.contracts.web",  # /api/contracts/* and the contract judgments playground at /contracts/
]

EngineFactory = Callable[[ServeSettings], ServiceEngine]

_ERRORS = {
    code: {"model": ErrorBody, "description": text}
    for code, text in {
        400: "Malformed JSON.",
        403: "A write sent by a page of another site (Sec-Fetch-Site: cross-site).",
        408: "The body was not received whole within the timeout.",
        413: "Body over the configured size.",
        415: "Body not sent as JSON (content-type: application/json).",
        422: "Invalid request; `error.field` names the field.",
        429: "Queue full; retry later.",
        503: "Model not loaded, shutting down, or too busy to compile a schema in time.",
        504: "The request outlived its timeout.",
    }.items()
}


def default_engine_factory(settings: ServeSettings) -> ServiceEngine:
    """Load the model named by the settings (``None``: the shipped default)."""
    from decision.serve.engine import ModelEngine

    return ModelEngine.load(settings.model_path, device=settings.device)


class _OutcomeMiddleware:
    """Counts every ``POST /decide`` by outcome and times it, whatever layer answered it.

    A client that disconnected before its answer counts as ``disconnected``, not by the status
    nobody received (the 504 of its abandoned decision): the service's disconnect watch reads
    ``http.disconnect`` through this middleware's ``receive``.
    """

    OUTCOMES = {200: "ok", 400: "invalid", 413: "invalid", 422: "invalid", 429: "overloaded",
                503: "unavailable", 504: "timeout"}

    def __init__(self, app: ASGIApp, service: DecisionService) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != "/decide":
            await self.app(scope, receive, send)
            return
        start = time.monotonic()
        status: int | None = None  # None until the response starts
        disconnected = False

        async def watch_receive() -> Message:
            nonlocal disconnected
            message = await receive()
            if message["type"] == "http.disconnect" and status is None:
                disconnected = True
            return message

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, watch_receive, watch)
        finally:
            outcome = self._outcome(500 if status is None else status, disconnected)
            metrics = self.service.metrics
            metrics.requests.inc(outcome=outcome)
            metrics.latency.observe(time.monotonic() - start, outcome=outcome)

    @classmethod
    def _outcome(cls, status: int, disconnected: bool) -> str:
        """The ``outcome`` label of a request answered ``status``."""
        if disconnected:
            return "disconnected"
        return cls.OUTCOMES.get(status, "error" if status >= 500 else "invalid")


class ServiceServer(uvicorn.Server):
    """uvicorn's server, telling the app's ``DecisionService`` when shutdown begins: the requests
    still queued are answered 503 at once instead of waiting out the graceful-shutdown time
    (and then being cancelled into bare 500s); the batch in progress finishes."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        service = getattr(getattr(self.config.app, "state", None), "service", None)
        if isinstance(service, DecisionService):
            service.begin_shutdown()
        await super().shutdown(sockets)


def check_app_settings(modules: list[str] | None = None) -> None:
    """Run each app module's ``check_settings`` (raises ``ValueError`` on a bad setting)."""
    for name in APP_MODULES if modules is None else modules:
        check = getattr(importlib.import_module(name), "check_settings", None)
        if check is not None:
            check()


def _mount_app_modules(app: FastAPI, modules: list[str]) -> None:
    for name in modules:
        module = importlib.import_module(name)
        app.include_router(module.router)
        static_dir = getattr(module, "static_dir", None)
        if static_dir is not None:
            package = name.split(".")[1] if name.count(".") >= 1 else name
            url = getattr(module, "static_url", f"/apps/{package}")
            static = StaticPages(directory=Path(static_dir), html=True)
            app.mount(url, static, name=f"{name}:static")


def create_app(
    settings: ServeSettings | None = None,
    *,
    engine: ServiceEngine | None = None,
    engine_factory: EngineFactory | None = None,
) -> FastAPI:
    """Build the service. The lifespan loads the model (``engine_factory``, default: the
    checkpoint at ``settings.model_path``) unless a loaded ``engine`` is given, starts the worker
    that owns it, and stops the worker at shutdown."""
    settings = settings or ServeSettings()
    service = DecisionService(settings)
    factory = engine_factory or default_engine_factory

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loaded = engine if engine is not None else await anyio.to_thread.run_sync(factory, settings)
        service.start(loaded)
        log.info("model %s loaded; worker started", loaded.name)
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(service.stop)

    app = FastAPI(
        title="decision",
        summary="Joint-mode structured decisions from a block-diffusion language model.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.settings = settings
    install_error_handlers(app)

    @app.post("/decide", response_model=DecideResponse, responses=_ERRORS, tags=["decide"])
    async def decide(
        body: DecideBody, svc: ServiceDep, request: Request
    ) -> DecideResponse:
        """Answer questions about one document: up to 8 in joint mode (one block), up to 64
        in standalone (one question a pass) or auto mode (joint passes of up to 8). Every
        answer parses under its schema."""
        return await svc.decide(body, request)

    @app.get("/health", response_model=HealthBody, tags=["service"])
    async def health(svc: ServiceDep) -> HealthBody:
        """Liveness, and whether the model is loaded and its worker running."""
        return HealthBody(
            status="ok" if svc.ready else "degraded",
            model_loaded=svc.ready,
            model=svc.engine.name if svc.engine is not None else None,
            queue_depth=svc.worker.depth if svc.worker is not None else 0,
        )

    @app.head("/health", include_in_schema=False)
    async def health_head(svc: ServiceDep) -> Response:
        """``GET /health`` without its body: load balancers and uptime checks often ask HEAD
        (answered 405 before). 200 either way, as GET; ``status`` is in GET's body."""
        return Response(status_code=200)

    @app.get("/models", response_model=ModelsBody, tags=["service"])
    async def models(svc: ServiceDep) -> ModelsBody:
        """The loaded model: name, size and what it accepts."""
        return ModelsBody(models=[svc.engine.info()] if svc.engine is not None else [])

    @app.get("/metrics", response_class=PlainTextResponse, tags=["service"])
    async def metrics(svc: ServiceDep) -> PlainTextResponse:
        """Prometheus text format: requests by outcome, latency, queue depth, batch sizes,
        steps and tokens per forward."""
        return PlainTextResponse(
            svc.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    if settings.include_apps:
        _mount_app_modules(app, APP_MODULES)

    app.add_middleware(CrossSiteWriteMiddleware)  # inside the outcome count: a 403 is "invalid"
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes,
                       timeout_s=settings.request_timeout_s)
    app.add_middleware(_OutcomeMiddleware, service=service)
    install_request_ids(app)  # outside every layer, so every answer (a crash's 500 too) has one
    return app
