"""Clients that misbehave at the HTTP level, against a real uvicorn server: a body that stalls or
trickles in past ``--timeout`` (a declared length never reached, slowloris, a chunked body that
never ends), a client that leaves while its request is queued, pipelining, ``Expect:
100-continue``, a flood past the queue, a body not in UTF-8 whatever its ``charset`` says, and
duplicate keys. Resources stay bounded (no request waits for ever, no queue slot is kept for a
client that left) and the other clients are served throughout.

The model is a stand-in (``_Engine``): these tests are about the HTTP layer, not decoding.
"""

from __future__ import annotations

import json
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from decision.serve import ServeSettings, create_app
from decision.serve.testing import running_server

TIMEOUT_S = 1.0  # --timeout of the servers here: a stalled body is answered this soon


class _Engine:
    """No model: answers every question ``True``; a request of the document "held" is decided
    only once the test sets ``release`` (``entered`` says it is being decided), and records
    the documents of every batch."""

    name = "fake"

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.release = threading.Event()
        self.entered = threading.Event()

    def prepare(self, body: Any) -> Any:
        return body

    def decide_many(self, prepared: Sequence[Any]) -> list[Any]:
        self.batches.append([body.document for body in prepared])
        if any(body.document == "held" for body in prepared):
            self.entered.set()
            assert self.release.wait(30), "the test never released the held request"
        return [SimpleNamespace(
            answers=[SimpleNamespace(id=q.id, value=True, text="yes", confidence=1.0,
                                     option_probabilities=None) for q in body.questions],
            mode="joint", steps=1, tokens_per_forward=1.0, timings={},
        ) for body in prepared]

    def info(self) -> Any:
        raise AssertionError("never asked")


def _body(document: str = "The rent is due on day 1.") -> dict[str, Any]:
    return {"document": document,
            "questions": [{"id": "due", "text": "Is rent due?", "answer": {"type": "boolean"}}]}


def _payload(document: str = "The rent is due on day 1.") -> bytes:
    return json.dumps(_body(document)).encode()


def _head(length: int | None, extra: bytes = b"") -> bytes:
    framing = (b"transfer-encoding: chunked\r\n" if length is None
               else b"content-length: %d\r\n" % length)
    return (b"POST /decide HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n"
            + framing + extra + b"\r\n")


def _hold_the_worker(port: int) -> socket.socket:
    """A connection whose request (document "held") the stand-in engine keeps deciding until
    the test sets its ``release``."""
    held = socket.create_connection(("127.0.0.1", port), timeout=10)
    payload = _payload("held")
    held.sendall(_head(len(payload), b"connection: close\r\n") + payload)
    return held


@pytest.fixture
def served() -> Iterator[tuple[str, int, _Engine, Any]]:
    engine = _Engine()
    settings = ServeSettings(include_apps=False, request_timeout_s=TIMEOUT_S, queue_size=2,
                             max_batch_size=1, max_wait_ms=0)
    app = create_app(settings, engine=engine)
    try:
        with running_server(app) as url:
            yield url, int(url.rsplit(":", 1)[1]), engine, app.state.service.metrics
    finally:
        engine.release.set()


def _read_response(sock: socket.socket, within_s: float = 10.0) -> bytes:
    """Everything the server sends until it closes the connection (``within_s`` at most)."""
    sock.settimeout(within_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        pytest.fail(f"the server neither answered nor closed within {within_s} s: {data!r}")
    except ConnectionResetError:
        pass
    return data


def _read_one(sock: socket.socket, within_s: float = 10.0) -> bytes:
    """One response (by its ``content-length``), the connection left open."""
    sock.settimeout(within_s)
    data = b""
    while b"\r\n\r\n" not in data or len(data) < _end_of_first(data):
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection: {data!r}"
        data += chunk
    return data


def _end_of_first(data: bytes) -> int:
    head, _, _ = data.partition(b"\r\n\r\n")
    match = re.search(rb"(?im)^content-length: *(\d+)", head)
    return len(head) + 4 + (int(match.group(1)) if match else 0)


def _responses(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """The responses in ``data``: status, headers (lower-case names) and body (by length)."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        length = int(headers.get("content-length", "0"))
        out.append((int(lines[0].split()[1]), headers, rest[:length]))
        data = rest[length:]
    return out


def _stall_after_a_short_body(sock: socket.socket) -> None:
    payload = _payload()
    sock.sendall(_head(len(payload) + 50) + payload)  # 50 bytes promised, never sent


def _stall_mid_chunked_body(sock: socket.socket) -> None:
    sock.sendall(_head(None) + b"10\r\n" + _payload()[:16] + b"\r\n")  # no last chunk


def _trickle(sock: socket.socket, pieces: Iterator[bytes]) -> None:
    """Send a piece every 50 ms until the server answers (the socket turns readable), for 30 s
    at most: the answer is due after TIMEOUT_S (~1.05 s here, loaded); unfixed, it never came."""
    deadline = time.monotonic() + 30
    for piece in pieces:
        if time.monotonic() > deadline:
            break
        if select.select([sock], [], [], 0.05)[0]:
            return
        try:
            sock.sendall(piece)
        except OSError:  # the server answered and closed meanwhile
            return
    pytest.fail("the server never answered the trickled body")


def _slowloris_declared(sock: socket.socket) -> None:
    payload = _payload() + b" " * 10_000  # 10 s of bytes at one per 50 ms: past the timeout
    sock.sendall(_head(len(payload)))
    _trickle(sock, (bytes([b]) for b in payload))


def _slowloris_chunked(sock: socket.socket) -> None:
    sock.sendall(_head(None))
    _trickle(sock, (b"1\r\n \r\n" for _ in range(10_000)))  # a chunked body that never ends


STALLS: dict[str, Callable[[socket.socket], None]] = {
    "content-length larger than the body sent": _stall_after_a_short_body,
    "chunked body stalled": _stall_mid_chunked_body,
    "slowloris, one byte at a time": _slowloris_declared,
    "chunked body that never ends": _slowloris_chunked,
}


def _counted(metrics: Any, outcome: str, expected: int = 1, within_s: float = 10.0) -> float:
    """The requests counted with ``outcome``, once ``expected`` are (or after ``within_s``): a
    request is counted when its handler ends, a moment after its client has the answer (read at
    once, the count was 0 under load)."""
    deadline = time.monotonic() + within_s
    while metrics.requests.value(outcome=outcome) < expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return metrics.requests.value(outcome=outcome)


@pytest.mark.parametrize("stall", STALLS.values(), ids=list(STALLS))
def test_a_body_not_received_within_the_timeout_is_answered_408(
    served: tuple[str, int, _Engine, Any], stall: Callable[[socket.socket], None]
) -> None:
    # A request whose body never arrived (or arrived a byte at a time) was waited for as long
    # as its client held the connection: --timeout began only once the body was read, and
    # uvicorn has no time limit of its own on a body. Each such client held a connection, a task
    # and up to --max-body-bytes of buffer for ever.
    url, port, engine, metrics = served
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        started = time.monotonic()
        stall(sock)
        # the others are served meanwhile
        assert httpx.post(f"{url}/decide", json=_body("Another."), timeout=10).status_code == 200
        data = _read_response(sock, within_s=30)  # due after TIMEOUT_S; unfixed, never
        waited = time.monotonic() - started
    [(status, headers, body)] = _responses(data)
    assert status == 408, data
    error = json.loads(body)["error"]
    assert error["type"] == "request_timeout", error
    assert f"within {TIMEOUT_S:g} s" in error["message"], error
    assert error["request_id"] == headers["x-request-id"]
    assert headers["connection"] == "close"  # and it did close: _read_response got to the end
    assert waited >= TIMEOUT_S
    assert engine.batches == [["Another."]]  # the stalled request was never decided
    assert _counted(metrics, "invalid") == 1
    assert _counted(metrics, "ok") == 1
    assert httpx.get(f"{url}/health").json() == {
        "status": "ok", "model_loaded": True, "model": "fake", "queue_depth": 0}


def test_the_openapi_schema_declares_the_408() -> None:
    spec = create_app(ServeSettings(include_apps=False), engine=_Engine()).openapi()
    assert "408" in spec["paths"]["/decide"]["post"]["responses"]


def test_a_body_sent_slowly_but_within_the_timeout_is_decided(
    served: tuple[str, int, _Engine, Any],
) -> None:
    """The body's time limit covers the body only: once it is in, the request is decided (and
    its disconnect watch, which reads on past the body, is not cut short)."""
    url, port, engine, metrics = served
    payload = _payload("Slow but in time.")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(_head(len(payload), b"connection: close\r\n") + payload[:10])
        time.sleep(TIMEOUT_S / 5)
        sock.sendall(payload[10:])
        [(status, _, body)] = _responses(_read_response(sock))
    assert status == 200, body
    assert engine.batches == [["Slow but in time."]]
    assert _counted(metrics, "ok") == 1


def test_a_client_that_leaves_while_queued_keeps_no_slot_and_is_never_decided(
    served: tuple[str, int, _Engine, Any],
) -> None:
    url, port, engine, metrics = served
    held = _hold_the_worker(port)
    assert engine.entered.wait(10)  # the worker is busy with it
    with socket.create_connection(("127.0.0.1", port), timeout=10) as queued:
        payload = _payload("queued")
        queued.sendall(_head(len(payload)) + payload)
        deadline = time.monotonic() + 10
        while httpx.get(f"{url}/health").json()["queue_depth"] != 1:
            assert time.monotonic() < deadline, "the request never reached the queue"
            time.sleep(0.01)
    deadline = time.monotonic() + 10
    while metrics.requests.value(outcome="disconnected") != 1:
        assert time.monotonic() < deadline, "the client that left was not counted"
        time.sleep(0.01)
    assert httpx.get(f"{url}/health").json()["queue_depth"] == 0
    # its slot is free (queue_size 2): two more fit while the worker is still held
    with ThreadPoolExecutor(2) as pool:
        waiting = [pool.submit(httpx.post, f"{url}/decide", json=_body(f"next {i}"), timeout=10)
                   for i in range(2)]
        while httpx.get(f"{url}/health").json()["queue_depth"] != 2:
            assert not any(f.done() for f in waiting), [f.result().text for f in waiting]
            time.sleep(0.01)
        engine.release.set()
        assert [f.result().status_code for f in waiting] == [200, 200]
    [(status, _, _)] = _responses(_read_response(held))
    held.close()
    assert status == 200
    assert "queued" not in {doc for batch in engine.batches for doc in batch}
    assert metrics.requests.value(outcome="disconnected") == 1
    assert _counted(metrics, "ok", 3) == 3


def test_two_pipelined_requests_on_one_connection_are_answered_in_order(
    served: tuple[str, int, _Engine, Any],
) -> None:
    _, port, engine, _ = served
    one, two = _payload("one"), _payload("two")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(_head(len(one)) + one
                     + _head(len(two), b"connection: close\r\n") + two)
        answers = _responses(_read_response(sock))
    assert [status for status, _, _ in answers] == [200, 200]
    assert engine.batches == [["one"], ["two"]]
    ids = [headers["x-request-id"] for _, headers, _ in answers]
    assert len(set(ids)) == 2


def test_expect_100_continue_gets_its_continue_then_the_answer(
    served: tuple[str, int, _Engine, Any],
) -> None:
    _, port, engine, _ = served
    payload = _payload()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(_head(len(payload), b"expect: 100-continue\r\nconnection: close\r\n"))
        assert sock.recv(1024) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(payload)
        [(status, _, _)] = _responses(_read_response(sock))
    assert status == 200
    # one over the size limit is refused without its 100 Continue, so it is never sent
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(_head(2_000_000, b"expect: 100-continue\r\n"))
        [(status, _, body)] = _responses(_read_one(sock))
    assert status == 413 and json.loads(body)["error"]["type"] == "payload_too_large"


def test_a_flood_past_the_queue_is_429_then_normal_service(
    served: tuple[str, int, _Engine, Any],
) -> None:
    url, port, engine, metrics = served
    held = _hold_the_worker(port)
    assert engine.entered.wait(10)
    with ThreadPoolExecutor(12) as pool:
        flood = [pool.submit(httpx.post, f"{url}/decide", json=_body(f"flood {i}"), timeout=10)
                 for i in range(12)]
        deadline = time.monotonic() + 10
        while metrics.requests.value(outcome="overloaded") < 10:  # queue_size 2
            assert time.monotonic() < deadline, "the flood was not refused"
            time.sleep(0.01)
        engine.release.set()
        statuses = sorted(f.result().status_code for f in flood)
    assert statuses == [200] * 2 + [429] * 10
    refused = next(f.result() for f in flood if f.result().status_code == 429)
    assert refused.json()["error"]["type"] == "overloaded"
    assert refused.headers["retry-after"] == "1"
    [(status, _, _)] = _responses(_read_response(held))
    held.close()
    assert status == 200
    assert httpx.post(f"{url}/decide", json=_body("after"), timeout=10).status_code == 200
    assert httpx.get(f"{url}/health").json()["queue_depth"] == 0


def test_a_body_in_another_charset_is_400_saying_it_is_not_utf8(
    served: tuple[str, int, _Engine, Any],
) -> None:
    url, _, engine, _ = served
    latin1 = json.dumps(_body("Caf\xe9 rent."), ensure_ascii=False).encode("latin-1")
    r = httpx.post(f"{url}/decide", content=latin1,
                   headers={"content-type": "application/json; charset=latin-1"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "malformed_json"
    assert re.fullmatch(r"request body is not valid UTF-8: byte 0xe9 at position \d+",
                        error["message"]), error
    assert engine.batches == []


def test_of_duplicate_keys_the_last_one_wins(served: tuple[str, int, _Engine, Any]) -> None:
    """As documented in docs/service.md (JSON leaves it open; Python's reader keeps the last)."""
    url, _, engine, _ = served
    raw = (b'{"document": "first", "document": "last", "questions": '
           b'[{"id": "a", "text": "A?", "answer": {"type": "boolean"}}]}')
    r = httpx.post(f"{url}/decide", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    assert engine.batches == [["last"]]


def test_the_xiangqi_servers_body_has_the_same_time_limit(tmp_path: Any) -> None:
    """``decision xiangqi serve`` (its own app) waited for a stalled body as the service did."""
    from apps.xiangqi.api import create_app as xiangqi_app
    from apps.xiangqi.players import RandomPlayer

    app = xiangqi_app(tmp_path / "games.sqlite3", RandomPlayer(), body_timeout_s=TIMEOUT_S)
    with running_server(app) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"POST /api/xiangqi/games HTTP/1.1\r\nhost: test\r\ncontent-type: "
                         b"application/json\r\ncontent-length: 20\r\n\r\n{")
            status, headers, body = _responses(_read_response(sock))[0]
        assert status == 408 and headers["connection"] == "close"
        assert json.loads(body)["error"]["type"] == "request_timeout"
        assert httpx.post(f"{url}/api/xiangqi/games", json={}).status_code == 201
