"""Request ids: every HTTP answer carries an ``X-Request-ID`` header, and every error body the same
id as ``error.request_id``, so a client's failed request can be found in the server's log.

The client's own ``X-Request-ID`` is kept when it is 1 to 128 characters of ``[A-Za-z0-9._:-]``;
any other value, or none, is replaced by a fresh id (``uuid4().hex``), never echoed: it would go
into response headers and log lines as sent. A handler reads the id as ``request.state.request_id``
(``scope["state"]["request_id"]``) or :func:`current_request_id`.
"""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "X-Request-ID"
_VALID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_HEADER_KEY = HEADER.lower().encode("latin-1")


@dataclass
class _Answering:
    """The request being answered: its id, and whether its response has started (one object, so
    a task the response spawns, a StreamingResponse's, sees it start)."""

    request_id: str
    started: bool = False


_answering: ContextVar[_Answering | None] = ContextVar("decision_request", default=None)


def current_request_id() -> str | None:
    """The id of the request being answered; None outside :class:`RequestIdMiddleware`."""
    answering = _answering.get()
    return None if answering is None else answering.request_id


def response_started() -> bool:
    """Whether the response of the request being answered has started (its status and headers
    sent): a crash then can no longer be answered 500."""
    answering = _answering.get()
    return answering is not None and answering.started


def request_id_of(scope: Scope) -> str:
    """The client's ``X-Request-ID`` when it is valid (the first one sent), else a fresh id."""
    for key, value in scope.get("headers") or ():
        if key.lower() == _HEADER_KEY:
            sent = value.decode("latin-1")
            return sent if _VALID.fullmatch(sent) else uuid.uuid4().hex
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """Gives each HTTP request its id: in the scope's state, in :func:`current_request_id` while
    the request is answered, and as the ``X-Request-ID`` header of its response, whichever
    layer answered it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        outer = current_request_id()
        # inside another RequestIdMiddleware (an app with ids mounted in another, or installed
        # twice): keep its id, else a fresh id here would differ from the header the outer sets
        request_id = outer if outer is not None and state.get("request_id") == outer else (
            request_id_of(scope))
        state["request_id"] = request_id
        answering = _Answering(request_id)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = request_id  # replaces any set before
                answering.started = True
            await send(message)

        token = _answering.set(answering)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _answering.reset(token)


def install_request_ids(app: Starlette) -> None:
    """Make :class:`RequestIdMiddleware` the outermost layer of ``app``. ``add_middleware`` only
    adds layers inside Starlette's ``ServerErrorMiddleware``, which answers a crash's 500: that
    answer would leave without the header, and its body without the id."""
    build = app.build_middleware_stack

    def build_with_ids() -> ASGIApp:
        return RequestIdMiddleware(build())

    app.build_middleware_stack = build_with_ids  # type: ignore[method-assign]
