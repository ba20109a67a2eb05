"""Request ids: every answer of the service has an ``X-Request-ID`` (the client's when valid, else a
fresh one), every error body the same id, and a 500's log line names it."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi import Request
from fastapi.testclient import TestClient

from decision.serve import ServeSettings, create_app
from decision.serve.api import ModelInfo

BODY = {"document": "A document.", "questions": [
    {"id": "a", "text": "Is it so?", "answer": {"type": "boolean"}}]}
GENERATED = re.compile(r"[0-9a-f]{32}")
MAX_BODY = 1024


class _FakeEngine:
    """No model: answers every question ``True`` at once; ``crash`` makes every decision fail
    (a fault of the service, a 500)."""

    name = "fake"

    def __init__(self, crash: bool = False) -> None:
        self.crash = crash

    def prepare(self, body: Any) -> Any:
        return body

    def decide_many(self, prepared: Sequence[Any]) -> list[Any]:
        if self.crash:
            raise RuntimeError("the engine broke")
        return [SimpleNamespace(
            answers=[SimpleNamespace(id=q.id, value=True, text="yes", confidence=1.0,
                                     option_probabilities=None) for q in body.questions],
            mode="joint", steps=1, tokens_per_forward=1.0, timings={},
        ) for body in prepared]

    def info(self) -> ModelInfo:
        return ModelInfo(name="fake", path=None, parameters=None, max_questions=8,
                         max_document_tokens=None, modes=["joint"], answer_types=["boolean"])


def _app(crash: bool = False, include_apps: bool = False) -> Any:
    settings = ServeSettings(include_apps=include_apps, max_body_bytes=MAX_BODY)
    return create_app(settings, engine=_FakeEngine(crash))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(_app()) as c:
        yield c


def _generated(response: httpx.Response) -> str:
    request_id = response.headers["x-request-id"]
    assert GENERATED.fullmatch(request_id), request_id
    return request_id


def _error_id(response: httpx.Response) -> str:
    """The error body's request id, which must be the header's."""
    request_id = response.json()["error"]["request_id"]
    assert request_id == response.headers["x-request-id"], (request_id, response.headers)
    return str(request_id)


@pytest.mark.parametrize("sent", ["abc", "client-42", "A.b_c:d-e", "x" * 128, "0"])
def test_a_valid_client_id_is_echoed(client: TestClient, sent: str) -> None:
    r = client.post("/decide", json=BODY, headers={"X-Request-ID": sent})
    assert r.status_code == 200 and r.headers["x-request-id"] == sent
    bad = client.post("/decide", json={}, headers={"X-Request-ID": sent})
    assert bad.status_code == 422 and _error_id(bad) == sent


@pytest.mark.parametrize("sent", [
    "x" * 129, "", "has space", "a/b", "<script>", "tab\there", "vt\x0bhere", "del\x7f",
    "réq".encode(), "ид".encode(), b"nul\x00",
])
def test_an_invalid_client_id_is_replaced_never_echoed(
    client: TestClient, sent: str | bytes
) -> None:
    r = client.post("/decide", json={}, headers={"X-Request-ID": sent})
    assert r.status_code == 422
    assert _generated(r) == _error_id(r)


def test_each_request_gets_its_own_id(client: TestClient) -> None:
    ids = {_generated(client.get("/health")) for _ in range(5)}
    assert len(ids) == 5


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/decide"), ("GET", "/health"), ("GET", "/metrics"), ("GET", "/models"),
])
def test_a_generated_id_on_every_route(client: TestClient, method: str, path: str) -> None:
    r = client.request(method, path, json=BODY if method == "POST" else None)
    assert r.status_code == 200, r.text
    _generated(r)


@pytest.mark.parametrize(("method", "path", "status", "kind"), [
    ("GET", "/no-such-route", 404, "not_found"),
    ("GET", "/decide", 405, "method_not_allowed"),
    ("DELETE", "/health", 405, "method_not_allowed"),
])
def test_unknown_routes_and_methods(
    client: TestClient, method: str, path: str, status: int, kind: str
) -> None:
    r = client.request(method, path)
    assert r.status_code == status and r.json()["error"]["type"] == kind
    assert _generated(r) == _error_id(r)


@pytest.mark.parametrize("how", ["content-length", "chunked"])
def test_a_body_over_the_limit(client: TestClient, how: str) -> None:
    """The 413 comes from BodyLimitMiddleware (declared length) or from its ``receive`` (a chunked
    body counted as it streams): both carry the id."""
    big = b'{"document": "' + b"x" * (2 * MAX_BODY) + b'"}'
    content: Any = big if how == "content-length" else iter([big[:MAX_BODY], big[MAX_BODY:]])
    r = client.post("/decide", content=content,
                    headers={"content-type": "application/json", "X-Request-ID": "big-1"})
    assert r.status_code == 413 and r.json()["error"]["type"] == "payload_too_large"
    assert _error_id(r) == "big-1"
    r = client.post("/decide", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and _generated(r) == _error_id(r)


def test_malformed_json_and_media_type(client: TestClient) -> None:
    r = client.post("/decide", content=b"{", headers={"content-type": "application/json"})
    assert r.status_code == 400 and _generated(r) == _error_id(r)
    r = client.post("/decide", content=b"a=1",
                    headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415 and _generated(r) == _error_id(r)


def test_a_crash_is_500_with_the_id_in_the_body_the_header_and_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The 500 is answered by Starlette's ServerErrorMiddleware, outside every middleware added
    with ``add_middleware``: the id layer must be outside it too."""
    with TestClient(_app(crash=True), raise_server_exceptions=False) as c:
        with caplog.at_level(logging.ERROR, logger="decision.serve"):
            r = c.post("/decide", json=BODY)
            sent = c.post("/decide", json=BODY, headers={"X-Request-ID": "crash-7"})
    assert r.status_code == 500 and r.json()["error"]["type"] == "internal_error"
    generated = _generated(r)
    assert _error_id(r) == generated
    assert sent.status_code == 500 and _error_id(sent) == "crash-7"
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "decision.serve"]
    for request_id in (generated, "crash-7"):
        assert any(request_id in line and "500" in line for line in lines), lines
    # the id is noted on the exception too: the server's traceback of it ends with the id
    with TestClient(_app(crash=True)) as c, pytest.raises(RuntimeError) as raised:
        c.post("/decide", json=BODY, headers={"X-Request-ID": "crash-8"})
    assert "request id: crash-8" in getattr(raised.value, "__notes__", [])


def test_refusals_429_and_503() -> None:
    from decision.serve.errors import ServiceError

    app = _app()

    @app.get("/full")
    async def full() -> None:
        raise ServiceError(429, "overloaded", "the queue is full")

    c = TestClient(app)  # not started: the model is not loaded
    r = c.post("/decide", json=BODY, headers={"X-Request-ID": "early"})
    assert r.status_code == 503 and _error_id(r) == "early"
    r = c.get("/full")
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    assert _generated(r) == _error_id(r)


def test_a_real_server_logs_the_id_with_the_traceback(capfd: pytest.CaptureFixture[str]) -> None:
    """Under uvicorn: the header over HTTP, and the id noted at the end of the one traceback."""
    from decision.serve.testing import running_server

    with running_server(_app(crash=True)) as url:
        r = httpx.post(f"{url}/decide", json=BODY, headers={"X-Request-ID": "real-1"}, timeout=30)
        ok = httpx.get(f"{url}/health", headers={"X-Request-ID": "bad id"}, timeout=30)
    assert r.status_code == 500 and _error_id(r) == "real-1"
    assert ok.status_code == 200 and _generated(ok)
    err = capfd.readouterr().err
    assert err.count("Traceback (most recent call last)") == 1, err
    assert "RuntimeError: the engine broke\nrequest id: real-1" in err, err


def test_the_id_is_in_the_scope_for_handlers() -> None:
    app = _app()

    @app.get("/echo-id")
    async def echo(request: Request) -> dict[str, str]:
        return {"id": request.state.request_id, "scope": request.scope["state"]["request_id"]}

    with TestClient(app) as c:
        r = c.get("/echo-id", headers={"X-Request-ID": "mine"})
        assert r.json() == {"id": "mine", "scope": "mine"}
        r = c.get("/echo-id")
        assert r.json()["id"] == _generated(r)


def test_the_apps_routes_have_ids(tmp_path: Path) -> None:
    from apps.xiangqi.api import configure
    from apps.xiangqi.api import create_app as xiangqi_app
    from apps.xiangqi.store import GameStore

    app = _app(include_apps=True)
    configure(app, GameStore(tmp_path / "games.sqlite3"), lambda: None)  # type: ignore[arg-type]
    with TestClient(app) as c:
        created = c.post("/api/xiangqi/games", json={}, headers={"X-Request-ID": "game-1"})
        assert created.status_code == 201 and created.headers["x-request-id"] == "game-1"
        missing = c.get("/api/xiangqi/games/nope")
        assert missing.status_code == 404 and _generated(missing) == _error_id(missing)
        game = created.json()["id"]
        illegal = c.post(f"/api/xiangqi/games/{game}/moves", json={"move": "a0a9"})
        assert illegal.status_code == 422 and "legal_moves" in illegal.json()["error"]
        assert _generated(illegal) == _error_id(illegal)
        bad = c.post("/api/xiangqi/games", json={"model_side": "green"})
        assert bad.status_code == 422 and _generated(bad) == _error_id(bad)
        _generated(c.get("/xiangqi/"))  # a static page of a mounted app
        contracts = c.post("/api/contracts/check", json={"preset": "x", "answers": {}})
        assert contracts.status_code == 422 and _generated(contracts) == _error_id(contracts)
    # the Xiangqi app served on its own (decision xiangqi serve) has them too
    with TestClient(xiangqi_app(tmp_path / "alone.sqlite3", lambda: None)) as c:  # type: ignore[arg-type]
        missing = c.get("/api/xiangqi/games/nope", headers={"X-Request-ID": "alone"})
        assert missing.status_code == 404 and _error_id(missing) == "alone"


def test_an_app_with_ids_inside_another_keeps_the_outer_id(tmp_path: Path) -> None:
    """The Xiangqi app (it installs ids itself) mounted in the service, or ids installed twice:
    the inner layer must not draw a second id, else the error body names another id than the
    header (the outer layer's)."""
    from apps.xiangqi.api import create_app as xiangqi_app
    from decision.serve.request_id import install_request_ids

    app = _app()
    app.mount("/x", xiangqi_app(tmp_path / "games.sqlite3", lambda: None))  # type: ignore[arg-type]
    twice = _app()
    install_request_ids(twice)
    with TestClient(app) as c, TestClient(twice) as t:
        for r in (c.get("/x/api/xiangqi/games/nope"), c.get("/x/api/xiangqi/games/nope",
                  headers={"X-Request-ID": "bad id"}), t.post("/decide", json={})):
            assert r.status_code in (404, 422)
            assert _generated(r) == _error_id(r)
        r = c.get("/x/api/xiangqi/games/nope", headers={"X-Request-ID": "mounted-1"})
        assert _error_id(r) == "mounted-1"


def test_a_crash_after_the_response_started_is_not_logged_as_a_500(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A streamed answer that fails midway left with status 200 (Starlette cannot send the 500
    then): the log line must not say the request was answered 500."""
    from fastapi.responses import StreamingResponse

    app = _app()

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def chunks() -> Any:
            yield b"first"
            raise RuntimeError("broke midway")
        return StreamingResponse(chunks())

    with TestClient(app, raise_server_exceptions=False) as c:
        with caplog.at_level(logging.ERROR, logger="decision.serve"):
            r = c.get("/stream", headers={"X-Request-ID": "stream-1"})
            crash = c.get("/no-route-crash")  # a 404, no crash: nothing logged
    assert r.status_code == 200 and r.headers["x-request-id"] == "stream-1"
    assert crash.status_code == 404
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "decision.serve"]
    assert len(lines) == 1 and "stream-1" in lines[0], lines
    assert "answered 500" not in lines[0] and "after its response started" in lines[0], lines


def test_of_two_client_ids_the_first_is_kept(client: TestClient) -> None:
    r = client.get("/health", headers=[("X-Request-ID", "first-1"), ("X-Request-ID", "second-2")])
    assert r.headers["x-request-id"] == "first-1"
