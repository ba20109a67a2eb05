"""Refuse the writes a browser makes on behalf of another site (cross-site request forgery).

The service has no accounts, but any page a visitor opens can make their browser send it a POST:
one without a body or with a form's content type needs no CORS preflight, so a page elsewhere
could create Xiangqi games, ask for model moves (seconds of the single worker) or take back moves
in a game it knows the id of, and the browser would never show it the answer. Browsers label
every request with Fetch Metadata's ``Sec-Fetch-Site``; a write (POST, PUT, PATCH, DELETE)
labelled ``cross-site`` is answered 403 ``cross_site_request`` before any route runs.

Reads, the pages' own requests (``same-origin``), a sibling host of the same site
(``same-site``), a typed URL (``none``) and clients that send no such header (curl, scripts,
browsers older than Fetch Metadata) are untouched: the header is set by the browser alone, so it
cannot be forged by the page that makes the request, and it does not depend on the ``Host`` a
proxy in front passes on (an ``Origin``-against-``Host`` check would).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from decision.serve.errors import error_response

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class CrossSiteWriteMiddleware:
    """Answer 403 to a write whose ``Sec-Fetch-Site`` header says another site sent it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in WRITE_METHODS:
            site = dict(scope.get("headers") or []).get(b"sec-fetch-site", b"")
            if site.strip().lower() == b"cross-site":
                refused = error_response(
                    403, "cross_site_request",
                    f"{scope['method']} {scope.get('path', '')} was sent by a page of another "
                    "site (Sec-Fetch-Site: cross-site); this service takes writes from its own "
                    "pages and from clients outside a browser",
                )
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)
