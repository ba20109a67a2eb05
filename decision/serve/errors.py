"""Error responses: every failure leaves as ``{"error": {"type", "message", "field",
"request_id"}}``, ``request_id`` the answer's ``X-Request-ID`` (:mod:`decision.serve.request_id`);
the static pages too (:class:`StaticPages`: a ``Range`` they cannot serve is a JSON 416, where
Starlette's ``FileResponse`` answered a plain-text 400 or an empty 416).

Status codes: 400 malformed JSON or no body, 403 a write sent by a page of another site
(:mod:`decision.serve.cross_site`), 404/405 unknown route or method (a 405 names the
allowed methods in its message and ``Allow`` header), 408 body not received within the timeout,
413 body over the limit, 415 a body not sent as JSON (content-type), 422 invalid request (the
field is named), 429 queue full, 503 model not loaded, shutting down, or too busy to compile a
schema, 504 request outlived its timeout, 500 only for a fault of the service itself, 416 a
static page asked with a ``Range`` header it cannot serve.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import FileResponse, Response
from starlette.routing import Match
from starlette.staticfiles import NotModifiedResponse, StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from decision.errors import CompileBusyError, DecisionInputError
from decision.serve.request_id import current_request_id, response_started

log = logging.getLogger("decision.serve")


class ServiceError(Exception):
    """An error with its HTTP status, type name and optional field, raised inside handlers."""

    def __init__(self, status: int, kind: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.field = field


def error_body(kind: str, message: str, field: str | None = None, **extra: Any) -> dict[str, Any]:
    """The body of every error: ``{"error": {"type", "message", "field", "request_id", **extra}}``,
    ``request_id`` the id of the request being answered (None outside ``RequestIdMiddleware``)."""
    error = {"type": kind, "message": message, "field": field, "request_id": current_request_id()}
    return {"error": {**error, **extra}}


def error_response(
    status: int, kind: str, message: str, field: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """An error answer: :func:`error_body` with its status and headers."""
    return JSONResponse(error_body(kind, message, field), status_code=status, headers=headers)


def _field_path(loc: Sequence[Any]) -> str | None:
    """Pydantic's ``("body", "questions", 3, "id")`` as ``"questions.3.id"``."""
    parts = [str(p) for p in loc]
    if parts and parts[0] == "body":
        parts = parts[1:]
    # Discriminated unions add the tag as a path element ("answer.choice.options"); keep it:
    # it tells the client which schema variant was checked.
    return ".".join(parts) or None


def body_error_response(
    first: Mapping[str, Any], request: Request, expected: str = "a JSON object"
) -> JSONResponse | None:
    """The answer to a request body that was not read as JSON at all, the same for every route
    of the service (``/decide`` and the apps' routes): 400 ``malformed_json`` for invalid JSON or
    an empty body, 415 ``unsupported_media_type`` for one not sent as JSON. ``first`` is the
    first of a ``RequestValidationError``'s errors; ``expected`` what the body should be, for
    the message. None when the body was read as JSON: what it holds is the route's to judge.
    (A body FastAPI could not read at all, not UTF-8 say, is an ``HTTPException`` answered by
    :func:`install_error_handlers`.)"""
    if first.get("type") == "json_invalid":
        ctx = first.get("ctx") or {}
        detail = ctx.get("error", "malformed JSON")
        return error_response(400, "malformed_json", f"request body is not valid JSON: {detail}")
    if tuple(first.get("loc", ())) != ("body",):
        return None
    # The body as a whole: FastAPI found none, or did not parse it as JSON at all because the
    # content-type is not JSON (curl -d sends application/x-www-form-urlencoded).
    if first.get("type") == "missing":
        return error_response(
            400, "malformed_json",
            f"the request body is empty; send {expected} with content-type: application/json",
        )
    if isinstance(first.get("input"), bytes | bytearray):
        got = request.headers.get("content-type")
        return error_response(
            415, "unsupported_media_type",
            f"the request body must be {expected} sent with content-type: application/json "
            f"(got {'content-type: ' + repr(got) if got else 'no content-type'})",
        )
    return None


def _validation_response(exc: RequestValidationError, request: Request) -> JSONResponse:
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
    answered = body_error_response(first, request)
    if answered is not None:
        return answered
    field = _field_path(first.get("loc", ()))
    message = str(first.get("msg", "invalid request"))
    message = f"{field or 'request body'}: {message}"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return error_response(422, "validation_error", message, field)


def _unparsable_body(cause: BaseException | None) -> str:
    """Why FastAPI's JSON reader failed on a body (it says only "There was an error parsing the
    body"; the exception it caught is the ``__cause__``)."""
    if isinstance(cause, UnicodeDecodeError):
        return (f"request body is not valid UTF-8: byte 0x{cause.object[cause.start]:02x} at "
                f"position {cause.start}")
    if isinstance(cause, RecursionError):
        return "request body is not readable JSON: it is nested too deeply"
    if isinstance(cause, ValueError) and "integer string conversion" in str(cause):
        return ("request body is not readable JSON: it holds an integer of more than "
                f"{sys.get_int_max_str_digits()} digits")
    if cause is not None:
        return f"request body is not readable JSON: {type(cause).__name__}: {cause}"
    return "request body is not readable JSON"


def _allowed_methods(exc: StarletteHTTPException, request: Request) -> list[str]:
    """The methods a 405's ``Allow`` header names, sorted: those of every route on the path.
    Starlette names only the first route's (``GET`` for ``/health``, whose ``HEAD`` is a route
    of its own), joined from a set."""
    methods: set[str] = set()
    for route in getattr(request.app, "routes", ()):
        route_methods = getattr(route, "methods", None)
        if route_methods and route.matches(request.scope)[0] is not Match.NONE:
            methods |= set(route_methods)
    allow = (exc.headers or {}).get("Allow", "")
    return sorted(methods | {m.strip() for m in allow.split(",") if m.strip()})


def _http_error_response(exc: StarletteHTTPException, request: Request) -> JSONResponse:
    """An ``HTTPException`` in the JSON shape, with its headers (a 405's ``Allow``) kept."""
    headers = dict(exc.headers or {})
    if exc.status_code == 400:  # FastAPI's body reader: not UTF-8, too deeply nested, ...
        return error_response(400, "malformed_json", _unparsable_body(exc.__cause__),
                              headers=headers or None)
    message = str(exc.detail)
    if exc.status_code == 405:
        allowed = _allowed_methods(exc, request)
        message = f"method {request.method} is not allowed on {request.url.path}"
        if allowed:
            headers["Allow"] = ", ".join(allowed)
            message += f"; allowed: {', '.join(allowed)}"
    kinds = {404: "not_found", 405: "method_not_allowed", 408: "request_timeout",
             413: "payload_too_large"}
    return error_response(
        exc.status_code, kinds.get(exc.status_code, "http_error"), message, headers=headers or None
    )


def install_error_handlers(app: FastAPI) -> None:
    """Map every exception a request can raise to the JSON error shape."""

    @app.exception_handler(RequestValidationError)
    async def _on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_response(exc, request)

    @app.exception_handler(DecisionInputError)
    async def _on_input(_: Request, exc: DecisionInputError) -> JSONResponse:
        return error_response(422, "validation_error", exc.message, exc.field)

    @app.exception_handler(CompileBusyError)
    async def _on_busy(_: Request, exc: CompileBusyError) -> JSONResponse:
        return error_response(503, "unavailable", exc.message, exc.field, {"Retry-After": "1"})

    @app.exception_handler(ServiceError)
    async def _on_service(_: Request, exc: ServiceError) -> JSONResponse:
        headers = {"Retry-After": "1"} if exc.status in (429, 503) else None
        return error_response(exc.status, exc.kind, exc.message, exc.field, headers)

    @app.exception_handler(StarletteHTTPException)
    async def _on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _http_error_response(exc, request)

    @app.exception_handler(Exception)
    async def _on_crash(_: Request, exc: Exception) -> JSONResponse:
        # The traceback is not logged here: Starlette raises the exception on after this answer,
        # and the server logs it with its traceback (uvicorn: "Exception in ASGI application");
        # logging it here too printed every crash's traceback twice. This line names the request
        # id the client got, and so does a note at the end of that traceback.
        request_id = current_request_id()
        # Starlette sends this answer only if no response has started
        what = ("failed after its response started (the client's answer is cut short, not a 500)"
                if response_started() else "answered 500 internal_error")
        log.error("request %s %s: %s (traceback logged by the server)", request_id, what,
                  type(exc).__name__)
        if request_id is not None:
            exc.add_note(f"request id: {request_id}")
        return error_response(500, "internal_error", f"internal error: {type(exc).__name__}")


class BodyLimitMiddleware:
    """Answer 413 for a request body over ``max_bytes``, before any of it is parsed, and 408 for
    one not received whole within ``timeout_s`` of the request's start.

    Checks the declared ``Content-Length`` first, then counts the bytes actually received (a
    chunked body has no length), so an oversized body is never read into memory whole. The time
    limit is on the whole body, not on each read: without it a client that declared more than it
    sent, trickled its body a byte at a time or never ended a chunked one was waited for as long
    as it held the connection (``--timeout`` starts once the body is in, and uvicorn has no limit
    of its own). The 408 closes the connection. Once the body is in, reads (a route's watch for
    the client's disconnect) are passed on untimed.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    def _too_large(self) -> JSONResponse:
        return error_response(
            413, "payload_too_large",
            f"request body is larger than the limit of {self.max_bytes} bytes",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_bytes
            except ValueError:
                too_big = False
            if too_big:
                await self._too_large()(scope, receive, send)
                return

        received = 0
        response_started = False
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        body_done = False

        async def limited_receive() -> Message:
            nonlocal received, body_done
            if body_done or deadline is None:
                message = await receive()
            else:
                try:
                    message = await asyncio.wait_for(
                        receive(), max(0.0, deadline - time.monotonic()))
                except TimeoutError:
                    raise _BodyTimedOut(self.timeout_s) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge(self.max_bytes)
                body_done = not message.get("more_body", False)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if not response_started:
                await self._too_large()(scope, receive, send)
        except _BodyTimedOut as exc:
            if not response_started:
                await _http_error_response(exc, Request(scope))(scope, receive, send)


class _BodyTooLarge(StarletteHTTPException):
    """Raised from ``receive``; an HTTPException so FastAPI's body reader passes it through."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"request body is larger than the limit of {max_bytes} bytes")


class _BodyTimedOut(StarletteHTTPException):
    """Raised from ``receive`` when the body is not in by its deadline (as ``_BodyTooLarge``);
    answered 408 ``request_timeout``, closing the connection: the rest of the body may come."""

    def __init__(self, timeout_s: float | None) -> None:
        super().__init__(408, f"the request body was not received within {timeout_s:g} s",
                         headers={"Connection": "close"})


class StaticPages(StaticFiles):
    """Starlette's ``StaticFiles`` (the demo pages), its files answering a ``Range`` header they
    cannot serve with the service's JSON error, 416 ``range_not_satisfiable`` (with
    ``Content-Range: bytes */SIZE``), where Starlette answered a plain-text 400 (a malformed
    range, a unit other than bytes) or an empty 416 (a range past the end). A range it can serve
    is answered as before (206, one part or several)."""

    def file_response(self, full_path: Any, stat_result: Any, scope: Scope,
                      status_code: int = 200) -> Response:
        # StaticFiles.file_response with the file answered by _RangeCheckedFile
        response = _RangeCheckedFile(full_path, status_code=status_code, stat_result=stat_result)
        if self.is_not_modified(response.headers, Headers(scope=scope)):
            return NotModifiedResponse(response.headers)
        return response


class _RangeCheckedFile(FileResponse):
    """A ``FileResponse`` whose refusal of a ``Range`` header is the service's JSON error.

    Starlette answers an unusable range inside ``FileResponse.__call__`` with a response of its
    own, the only 400 or 416 a file answered 200 can start; that answer is held back and the
    JSON error sent in its place (its text, "Range header: start must be less than end", goes
    into the message)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused: Message | None = None
        text = b""

        async def replace_refusal(message: Message) -> None:
            nonlocal refused, text
            if (refused is None and message["type"] == "http.response.start"
                    and message["status"] in (400, 416)):
                refused = message
                return
            if refused is None:
                await send(message)
                return
            if message["type"] != "http.response.body":
                return
            text += message.get("body", b"")
            if not message.get("more_body", False):
                await self._refusal(scope, refused, text.decode("utf-8", "replace"))(
                    scope, receive, send)

        await super().__call__(scope, receive, replace_refusal)

    def _refusal(self, scope: Scope, refused: Message, reason: str) -> JSONResponse:
        asked = Headers(scope=scope).get("range", "")
        shown = asked if len(asked) <= 100 else asked[:100] + "..."
        if self.stat_result is not None:
            size = str(self.stat_result.st_size)
        else:  # Starlette's 416 names the size in its Content-Range
            size = Headers(raw=refused.get("headers", [])).get("content-range", "*/").split("/")[-1]
        if refused["status"] == 416 or not reason:
            reason = f"a range of it starts past the end of the file ({size} bytes)"
        else:  # "Range header: start must be less than end", "Only support bytes range"
            reason = reason.removeprefix("Range header: ")
            reason = reason[:1].lower() + reason[1:].rstrip(".")
        return error_response(416, "range_not_satisfiable",
                              f"the Range header {shown!r} cannot be served: {reason}",
                              headers={"Content-Range": f"bytes */{size}"})
