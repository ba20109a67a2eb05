"""End to end over HTTP: a real uvicorn server on a free loopback port, a tiny random model loaded
by the app's lifespan, requests through httpx."""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decision.serve import ServeSettings, create_app
from decision.serve.engine import ModelEngine
from decision.serve.testing import running_server

MAX_BODY = 200_000
CHOICE = {"type": "choice", "options": ["yes", "no", "not stated"]}


def _q(qid: str, answer: dict[str, Any], text: str = "Is it so?") -> dict[str, Any]:
    # a copy: tests mutate bodies, and the shared CHOICE must stay as it is
    return {"id": qid, "text": text, "answer": copy.deepcopy(answer)}


def _body(document: str = "The tenant gave 20 days of notice; the lease requires 30 days.",
          mode: str = "joint", **options: Any) -> dict[str, Any]:
    return {
        "document": document,
        "questions": [
            _q("timely", {"type": "boolean"}, "Was notice timely?"),
            _q("days", {"type": "integer", "minimum": 0, "maximum": 90}, "Days of notice?"),
            _q("deposit", CHOICE, "May the deposit be retained?"),
        ],
        "mode": mode,
        "options": options,
    }


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoint_dir: Path) -> Path:
    return tiny_checkpoint_dir


@pytest.fixture(scope="module")
def server(checkpoint: Path) -> Iterator[str]:
    settings = ServeSettings(
        model_path=str(checkpoint), max_batch_size=32, max_wait_ms=50, queue_size=128,
        request_timeout_s=300, max_body_bytes=MAX_BODY, include_apps=False,
    )
    with running_server(create_app(settings)) as url:
        yield url


def _metric(text: str, name: str, labels: str = "") -> float:
    pattern = re.escape(name + (("{" + labels + "}") if labels else "")) + r" (\S+)"
    match = re.search("^" + pattern + "$", text, flags=re.MULTILINE)
    assert match, f"{name}{{{labels}}} not in /metrics"
    return float(match.group(1))


def test_health_models_docs(server: str) -> None:
    health = httpx.get(f"{server}/health").json()
    assert health == {"status": "ok", "model_loaded": True, "model": "tiny-model",
                      "queue_depth": 0}
    models = httpx.get(f"{server}/models").json()["models"]
    assert models[0]["name"] == "tiny-model" and models[0]["max_questions"] == 8
    assert models[0]["parameters"] > 0 and models[0]["max_document_tokens"] == 4096
    assert httpx.get(f"{server}/docs").status_code == 200
    spec = httpx.get(f"{server}/openapi.json").json()
    assert {"/decide", "/health", "/metrics", "/models"} <= set(spec["paths"])
    assert "422" in spec["paths"]["/decide"]["post"]["responses"]
    # HEAD, as load balancers and uptime checks ask it, was answered 405
    head = httpx.head(f"{server}/health")
    assert head.status_code == 200 and head.content == b"" and head.headers["x-request-id"]
    assert "head" not in spec["paths"]["/health"]


def test_commit_option_sets_the_steps(server: str) -> None:
    """threshold 1.0: one token a step with commit "token", one answer a step by default."""
    token = httpx.post(f"{server}/decide", json=_body(threshold=1.0, commit="token"), timeout=120)
    whole = httpx.post(f"{server}/decide", json=_body(threshold=1.0), timeout=120)
    assert token.status_code == whole.status_code == 200, (token.text, whole.text)
    assert whole.json()["steps"] == 3  # the three questions, one a step
    assert token.json()["steps"] > 3  # every slot token, one a step


def test_score_options_answers_the_most_probable_option(server: str) -> None:
    body = _body(return_probabilities=True, score_options=True)
    body["questions"] = [q for q in body["questions"] if q["id"] != "days"]
    response = httpx.post(f"{server}/decide", json=body, timeout=120)
    assert response.status_code == 200, response.text
    for answer in response.json()["answers"]:
        probs = answer["option_probabilities"]
        assert abs(sum(probs.values()) - 1) < 1e-4
        assert answer["text"] == max(probs, key=probs.get)
    # with an open question: it is denoised, the closed ones scored
    mixed = httpx.post(f"{server}/decide", json=_body(return_probabilities=True,
                                                      score_options=True), timeout=120)
    assert mixed.status_code == 200, mixed.text
    timely, days, deposit = mixed.json()["answers"]
    assert isinstance(days["value"], int) and 0 <= days["value"] <= 90
    assert days["option_probabilities"] is None
    for answer in (timely, deposit):
        probs = answer["option_probabilities"]
        assert answer["text"] == max(probs, key=probs.get)


@pytest.mark.parametrize("mode", ["joint", "standalone", "auto"])
def test_a_decision_in_each_mode(server: str, mode: str) -> None:
    response = httpx.post(f"{server}/decide", json=_body(mode=mode, return_probabilities=True),
                          timeout=120)
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["model"] == "tiny-model"
    assert data["mode"] == ("standalone" if mode == "standalone" else "joint")
    by_id = {a["id"]: a for a in data["answers"]}
    assert list(by_id) == ["timely", "days", "deposit"]
    assert isinstance(by_id["timely"]["value"], bool)
    assert isinstance(by_id["days"]["value"], int) and 0 <= by_id["days"]["value"] <= 90
    assert by_id["deposit"]["value"] in CHOICE["options"]
    probs = by_id["deposit"]["option_probabilities"]
    assert set(probs) == set(CHOICE["options"]) and abs(sum(probs.values()) - 1) < 1e-4
    assert by_id["days"]["option_probabilities"] is None
    assert all(0.0 <= a["confidence"] <= 1.0 for a in data["answers"])
    assert data["steps"] >= 1 and data["tokens_per_forward"] > 0
    assert {"prefill", "denoise", "total", "prepare_ms", "queue_ms", "total_ms"} <= set(
        data["timings"])
    assert data["timings"]["queue_ms"] <= data["timings"]["total_ms"]


def test_pattern_number_and_json_answers_parse_under_their_schemas(server: str) -> None:
    """These schemas compile in a guarded child process: also inside the serving process."""
    body = _with(questions=[
        _q("ref", {"type": "pattern", "regex": "[A-C][0-9]{2}", "max_tokens": 4}, "Clause?"),
        _q("rate", {"type": "number", "max_tokens": 5}, "Rate?"),
        _q("terms", {"type": "json", "max_tokens": 24, "schema": {
            "type": "object", "properties": {"late": {"type": "boolean"}},
            "required": ["late"]}}, "Terms?"),
    ])
    response = httpx.post(f"{server}/decide", json=body, timeout=120)
    assert response.status_code == 200, response.text
    ref, rate, terms = response.json()["answers"]
    assert re.fullmatch("[A-C][0-9]{2}", ref["value"])
    assert isinstance(rate["value"], float) and float(rate["text"]) == rate["value"]
    assert isinstance(terms["value"], dict) and isinstance(terms["value"]["late"], bool)


def _answers(data: dict[str, Any]) -> list[tuple[str, Any, str]]:
    return [(a["id"], a["value"], a["text"]) for a in data["answers"]]


def test_32_concurrent_clients_batched_and_each_answered_as_alone(
    server: str, checkpoint: Path
) -> None:
    documents = [
        "The tenant gave 20 days of notice; the lease requires 30 days.",
        "Rent of 900 euros is due on day 1, with a grace period of 5 days. Paid on day 9.",
        "The agreement renews automatically for 12 months unless either party objects.",
        "A late fee of 40 euros applies after 3 days; the landlord may retain the deposit.",
    ]
    bodies = [_body(doc, mode) for doc in documents for mode in ("joint", "standalone")]
    # The same requests answered alone, directly by the model (deterministic decoding).
    engine = ModelEngine.load(str(checkpoint))
    from decision.serve.api import DecideBody

    alone = []
    for body in bodies:
        decision = engine.decide_many([engine.prepare(DecideBody.model_validate(body))])[0]
        alone.append([(a.id, a.value, a.text) for a in decision.answers])

    before = httpx.get(f"{server}/metrics").text
    batches_before = _metric(before, "decision_batch_size_count")

    def client(i: int) -> tuple[int, int, dict[str, Any]]:
        with httpx.Client(timeout=300) as http:
            response = http.post(f"{server}/decide", json=bodies[i % len(bodies)])
            return i, response.status_code, response.json()

    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(client, range(32)))
    for i, status, data in results:
        assert status == 200, data
        assert _answers(data) == alone[i % len(bodies)], f"client {i} differs from alone"

    text = httpx.get(f"{server}/metrics").text
    batches = _metric(text, "decision_batch_size_count") - batches_before
    requests_in_batches = _metric(text, "decision_batch_size_sum") - _metric(
        before, "decision_batch_size_sum")
    singles = _metric(text, "decision_batch_size_bucket", 'le="1"') - _metric(
        before, "decision_batch_size_bucket", 'le="1"')
    assert requests_in_batches == 32
    assert batches < 32 and singles < batches, "no batch of more than one request was observed"
    assert _metric(text, "decision_requests_total", 'outcome="ok"') >= 32
    assert _metric(text, "decision_queue_depth") == 0
    assert _metric(text, "decision_model_loaded") == 1
    assert "decision_tokens_per_forward_bucket" in text and "decision_decode_steps_count" in text


def _nine_questions() -> dict[str, Any]:
    body = _body()
    body["questions"] = [_q(f"q{i}", {"type": "boolean"}) for i in range(9)]
    return body


def _with(**changes: Any) -> dict[str, Any]:
    body = _body()
    body.update(changes)
    return body


def _question(answer: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return _with(questions=[{**_q("a", answer), **extra}])


# (name, raw body or JSON object, expected status, error type, expected field or None)
BAD_REQUESTS: list[tuple[str, Any, int, str, str | None]] = [
    ("malformed JSON", b'{"document": "x", "questions": [', 400, "malformed_json", None),
    ("body not UTF-8", b'{"document": "\xff\xfe"}', 400, "malformed_json", None),
    ("body nested too deeply", b"[" * 50_000 + b"]" * 50_000, 400, "malformed_json", None),
    ("integer of 5000 digits", b'{"document": "x", "questions": [], "mode": ' + b"9" * 5000
     + b"}", 400, "malformed_json", None),
    ("not an object", [1, 2, 3], 422, "validation_error", None),
    ("missing document", {"questions": _body()["questions"]}, 422, "validation_error",
     "document"),
    ("missing questions", {"document": "x"}, 422, "validation_error", "questions"),
    ("document not a string", _with(document=42), 422, "validation_error", "document"),
    ("empty document", _with(document="   "), 422, "validation_error", "document"),
    ("no questions", _with(questions=[]), 422, "validation_error", "questions"),
    ("question without answer", _with(questions=[{"id": "a", "text": "Q?"}]), 422,
     "validation_error", "questions.0.answer"),
    ("unknown answer type", _question({"type": "colour"}), 422, "validation_error",
     "questions.0.answer"),
    ("9 questions in joint mode", _nine_questions(), 422, "validation_error", "questions"),
    ("document longer than the model accepts", _with(document="7 " * 5000), 422,
     "validation_error", "document"),
    ("body over the size limit", _with(document="x" * (MAX_BODY + 10)), 413,
     "payload_too_large", None),
    # found by the compile, not pydantic: named as pydantic names the answer's fields
    ("invalid regex", _question({"type": "pattern", "regex": "[a-"}), 422, "validation_error",
     "questions.0.answer.pattern.regex"),
    ("empty options", _question({"type": "choice", "options": []}), 422, "validation_error",
     "questions.0.answer.choice.options"),
    ("duplicate options", _question({"type": "choice", "options": ["a", "a"]}), 422,
     "validation_error", "questions.0.answer.choice.options"),
    ("duplicate question ids", _with(questions=[_q("a", {"type": "boolean"})] * 2), 422,
     "validation_error", "questions.1.id"),
    ("bad mode", _with(mode="both"), 422, "validation_error", "mode"),
    ("threshold zero", _with(options={"threshold": 0}), 422, "validation_error",
     "options.threshold"),
    ("threshold above one", _with(options={"threshold": 1.5}), 422, "validation_error",
     "options.threshold"),
    ("max_steps zero", _with(options={"max_steps": 0}), 422, "validation_error",
     "options.max_steps"),
    # lax pydantic read these as 1.0, 0.5, 1 and True, where decide refuses them
    ("threshold true", _with(options={"threshold": True}), 422, "validation_error",
     "options.threshold"),
    ("threshold a string", _with(options={"threshold": "0.5"}), 422, "validation_error",
     "options.threshold"),
    ("threshold NaN", _with(options={"threshold": float("nan")}), 422, "validation_error",
     "options.threshold"),
    ("max_steps true", _with(options={"max_steps": True}), 422, "validation_error",
     "options.max_steps"),
    ("return_probabilities a string", _with(options={"return_probabilities": "yes"}), 422,
     "validation_error", "options.return_probabilities"),
    ("options not an object", _with(options="fast"), 422, "validation_error", "options"),
    ("unknown commit", _with(options={"commit": "slot"}), 422, "validation_error",
     "options.commit"),
    ("unknown option", _with(options={"temperature": 0.7}), 422, "validation_error",
     "options.temperature"),
    ("integer minimum above maximum", _question({"type": "integer", "minimum": 5, "maximum": 1}),
     422, "validation_error", "questions.0.answer.integer"),
    # lax pydantic read these as 10, 1 and 5: schema fields are as strict as the options
    ("integer maximum a string", _question({"type": "integer", "maximum": "10"}), 422,
     "validation_error", "questions.0.answer.integer.maximum"),
    ("integer minimum true", _question({"type": "integer", "minimum": True}), 422,
     "validation_error", "questions.0.answer.integer.minimum"),
    ("integer maximum a float", _question({"type": "integer", "maximum": 10.0}), 422,
     "validation_error", "questions.0.answer.integer.maximum"),
    ("max_tokens a string", _question({"type": "pattern", "regex": "a+", "max_tokens": "5"}),
     422, "validation_error", "questions.0.answer.pattern.max_tokens"),
    ("options not strings", _question({"type": "choice", "options": [1, 2]}), 422,
     "validation_error", "questions.0.answer.choice.options.0"),
    ("unsupported JSON schema",
     _question({"type": "json", "schema": {"type": "object", "patternProperties": {}}}), 422,
     "validation_error", "questions.0.answer.json.schema"),
    ("empty question text", _with(questions=[{"id": "a", "text": "", "answer": CHOICE}]), 422,
     "validation_error", "questions.0.text"),
    ("question id not a string", _with(questions=[{"id": 7, "text": "Q", "answer": CHOICE}]),
     422, "validation_error", "questions.0.id"),
    ("unknown top-level field", _with(priority="high"), 422, "validation_error", "priority"),
]


@pytest.mark.parametrize(
    ("name", "payload", "status", "kind", "field"), BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS]
)
def test_bad_request_answered_with_status_and_message(
    server: str, name: str, payload: Any, status: int, kind: str, field: str | None
) -> None:
    content = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    response = httpx.post(f"{server}/decide", content=content,
                          headers={"content-type": "application/json"}, timeout=60)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == kind
    assert isinstance(error["message"], str) and len(error["message"]) > 5
    if field is not None:
        assert error["field"] is not None and error["field"].startswith(field), error
    for needle in MESSAGE_PARTS.get(name, ()):
        assert needle in error["message"], error


# What the message must say, beyond naming the field.
MESSAGE_PARTS: dict[str, tuple[str, ...]] = {
    # these three were "request body is not valid UTF-8 JSON (There was an error parsing the
    # body)", which is wrong for the last two and does not say where for the first
    "body not UTF-8": ("not valid UTF-8", "0xff at position 14"),
    "body nested too deeply": ("nested too deeply",),
    "integer of 5000 digits": ("integer of more than 4300 digits",),
    "9 questions in joint mode": ("at most 8", "got 9"),
    "document longer than the model accepts": ("10000 tokens", "at most 4096"),
    "body over the size limit": (str(MAX_BODY),),
    "invalid regex": ("regex",),
    "duplicate question ids": ("duplicate",),
    "threshold zero": ("greater than 0",),
    "threshold above one": ("less than or equal to 1",),
    "threshold NaN": ("finite",),
    "unknown answer type": ("colour",),
    "integer maximum a string": ("questions.0.answer.integer.maximum", "valid integer"),
    "max_tokens a string": ("valid integer",),
    "options not strings": ("valid string",),
}


def test_other_errors_are_json_and_the_server_stays_healthy(server: str) -> None:
    assert len(BAD_REQUESTS) >= 20
    not_found = httpx.get(f"{server}/nowhere")
    assert not_found.status_code == 404 and not_found.json()["error"]["type"] == "not_found"
    wrong_method = httpx.get(f"{server}/decide")
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["type"] == "method_not_allowed"
    # a chunked body (no content-length) over the limit is cut off while it streams
    chunks = (b"x" * 50_000 for _ in range(10))
    chunked = httpx.post(f"{server}/decide", content=chunks,
                         headers={"content-type": "application/json"})
    assert chunked.status_code == 413 and chunked.json()["error"]["type"] == "payload_too_large"
    assert httpx.get(f"{server}/health").json()["status"] == "ok"
    good = httpx.post(f"{server}/decide", json=_body(), timeout=120)
    assert good.status_code == 200
    text = httpx.get(f"{server}/metrics").text
    assert _metric(text, "decision_requests_total", 'outcome="invalid"') >= 1
    assert 'decision_requests_total{outcome="error"}' not in text  # never a 500


@pytest.fixture(scope="module")
def pages_server(checkpoint: Path) -> Iterator[str]:
    """The service with its demo apps' pages mounted (``server`` has none)."""
    with running_server(create_app(ServeSettings(model_path=str(checkpoint)))) as url:
        yield url


@pytest.mark.parametrize(("header", "why"), [
    ("bytes=999999999-", "a range of it starts past the end of the file ("),  # an empty 416
    ("bytes=0-1,999999999-", "a range of it starts past the end of the file ("),  # one part fits
    ("bytes=5-1", "start must be less than end"),  # these were plain-text 400s
    ("bytes=abc", "range must be requested"),
    ("items=0-9", "only support bytes range"),
])
def test_a_static_page_asked_a_range_it_cannot_serve_is_a_json_416(
        pages_server: str, header: str, why: str) -> None:
    """Starlette's StaticFiles answered an unusable Range itself, in plain text; every other
    error of the service is JSON."""
    size = len(httpx.get(f"{pages_server}/contracts/demo.js").content)
    for method in ("GET", "HEAD"):
        r = httpx.request(method, f"{pages_server}/contracts/demo.js", headers={"Range": header})
        assert r.status_code == 416, (method, r.status_code, r.text)
        assert r.headers["content-type"] == "application/json"
        assert r.headers["content-range"] == f"bytes */{size}"
    error = httpx.get(f"{pages_server}/contracts/", headers={"Range": header}).json()["error"]
    assert error["type"] == "range_not_satisfiable" and why in error["message"], error
    assert error["request_id"] and error["field"] is None


def test_a_static_page_serves_the_ranges_it_can(pages_server: str) -> None:
    whole = httpx.get(f"{pages_server}/contracts/demo.js").content
    r = httpx.get(f"{pages_server}/contracts/demo.js", headers={"Range": "bytes=0-9"})
    assert r.status_code == 206 and r.content == whole[:10]
    assert r.headers["content-range"] == f"bytes 0-9/{len(whole)}"
    r = httpx.get(f"{pages_server}/contracts/demo.js", headers={"Range": "bytes=-5"})
    assert r.status_code == 206 and r.content == whole[-5:]
    r = httpx.get(f"{pages_server}/contracts/demo.js", headers={"Range": "bytes=0-1,5-6"})
    assert r.status_code == 206 and r.headers["content-type"].startswith("multipart/byteranges")
    assert whole[:2] in r.content and whole[5:7] in r.content
    # an If-Range that no longer matches: the whole file, the range ignored
    r = httpx.get(f"{pages_server}/contracts/demo.js",
                  headers={"Range": "bytes=999999999-", "If-Range": '"stale"'})
    assert r.status_code == 200 and r.content == whole
    etag = httpx.get(f"{pages_server}/contracts/demo.js").headers["etag"]
    assert httpx.get(f"{pages_server}/contracts/demo.js",
                     headers={"If-None-Match": etag}).status_code == 304


@pytest.mark.parametrize("content_type", [
    "application/x-www-form-urlencoded",  # what curl -d sends without -H
    "text/plain",
    None,
])
def test_a_body_not_sent_as_json_is_415_saying_so(server: str, content_type: str | None) -> None:
    # FastAPI leaves such a body unparsed: it was a 422 "Input should be a valid dictionary or
    # object to extract fields from" with no field, which does not say what to change
    headers = {"content-type": content_type} if content_type else {}
    response = httpx.post(f"{server}/decide", content=json.dumps(_body()).encode(),
                          headers=headers)
    assert response.status_code == 415, response.text
    error = response.json()["error"]
    assert error["type"] == "unsupported_media_type"
    assert "content-type: application/json" in error["message"]
    assert (repr(content_type) if content_type else "no content-type") in error["message"]


def test_an_empty_body_is_400_saying_so(server: str) -> None:
    # it was a 422 "Field required" with no field
    response = httpx.post(f"{server}/decide", content=b"",
                          headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "malformed_json" and "empty" in error["message"]
    listed = httpx.post(f"{server}/decide", json=[1, 2])
    assert listed.status_code == 422
    assert listed.json()["error"]["message"].startswith("request body: ")


class _SlowEngine:
    """The real engine, slowed down: lets a test fill the queue and outlive the timeout."""

    def __init__(self, engine: ModelEngine, delay_s: float) -> None:
        self.inner, self.delay_s, self.name = engine, delay_s, engine.name
        self.prepared = 0  # requests that reached the service (validated)
        self._lock = threading.Lock()

    def prepare(self, body: Any) -> Any:
        with self._lock:
            self.prepared += 1
        return self.inner.prepare(body)

    def decide_many(self, prepared: Sequence[Any]) -> list[Any]:
        time.sleep(self.delay_s)
        return self.inner.decide_many(prepared)

    def info(self) -> Any:
        return self.inner.info()


def test_a_prepared_request_is_decoded_without_compiling_again(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prepared before it is queued, a request carries its automata: the worker does not
    compile again (the bounded compile cache may have evicted its schemas by then)."""
    from decision.joint import request as joint_request
    from decision.serve.api import DecideBody

    engine = ModelEngine.load(str(checkpoint))
    body = DecideBody.model_validate(_body("Rent is due on day 1.", "joint"))
    prepared = engine.prepare(body)

    def no_compile(*args: Any) -> Any:
        raise AssertionError("compiled again in the worker")

    monkeypatch.setattr(joint_request, "compile_question", no_compile)
    decision = engine.decide_many([prepared])[0]
    assert [a.id for a in decision.answers] == [q["id"] for q in _body("x", "joint")["questions"]]


def test_full_queue_429_and_timeout_504(checkpoint: Path) -> None:
    settings = ServeSettings(max_batch_size=1, max_wait_ms=0, queue_size=1,
                             request_timeout_s=0.5, include_apps=False)
    engine = _SlowEngine(ModelEngine.load(str(checkpoint)), delay_s=1.0)
    with running_server(create_app(settings, engine=engine)) as url:

        def client(_: int) -> httpx.Response:
            return httpx.post(f"{url}/decide", json=_body(), timeout=30)

        with ThreadPoolExecutor(max_workers=6) as pool:
            responses = list(pool.map(client, range(6)))
        statuses = sorted(r.status_code for r in responses)
        assert set(statuses) <= {429, 504}, statuses
        assert 429 in statuses and 504 in statuses
        for r in responses:
            error = r.json()["error"]
            assert error["type"] == {429: "overloaded", 504: "timeout"}[r.status_code]
            assert error["message"]
        assert next(r for r in responses if r.status_code == 429).headers["retry-after"] == "1"
        text = httpx.get(f"{url}/metrics").text
        assert _metric(text, "decision_requests_total", 'outcome="overloaded"') >= 1
        assert _metric(text, "decision_requests_total", 'outcome="timeout"') >= 1
        assert httpx.get(f"{url}/health").json()["model_loaded"] is True


def test_demo_apps_are_mounted(checkpoint: Path) -> None:
    from decision.serve.app import APP_MODULES

    app = create_app(ServeSettings(model_path=str(checkpoint)))
    api_paths = set(app.openapi()["paths"])
    mounts = {getattr(route, "path", "") for route in app.routes}
    for name in APP_MODULES:
        module = __import__(name, fromlist=["router"])
        assert {route.path for route in module.router.routes} <= api_paths
        if getattr(module, "static_url", None):
            assert module.static_url in mounts


def test_the_openapi_schema_declares_the_error_shape_the_routes_answer(checkpoint: Path) -> None:
    """The game and contract routes declared FastAPI's default 422 body, HTTPValidationError
    (``{"detail": [...]}``), which no route of the service sends: every error it answers is
    ``{"error": {...}}`` (ErrorBody), as ``/decide`` declares."""
    spec = create_app(ServeSettings(model_path=str(checkpoint))).openapi()
    declared = {
        (method, path, status): response["content"]["application/json"]["schema"]["$ref"]
        for path, operations in spec["paths"].items()
        for method, operation in operations.items()
        for status, response in operation["responses"].items()
        if status.startswith("4")
    }
    for path in ("/api/xiangqi/games", "/api/xiangqi/games/{game_id}/moves",
                 "/api/contracts/check", "/decide"):
        assert ("post", path, "422") in declared
    wrong = {key: ref for key, ref in declared.items() if ref != "#/components/schemas/ErrorBody"}
    assert not wrong, wrong
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def test_the_openapi_schema_declares_every_error_status_of_decide(checkpoint: Path) -> None:
    """``/openapi.json`` is the offline reference (docs/service.md): ``/decide`` answers 415 to
    a body not sent as JSON, which it did not declare, and its summary said "up to 8
    questions" of a route that takes 64 outside joint mode."""
    spec = create_app(ServeSettings(model_path=str(checkpoint), include_apps=False)).openapi()
    operation = spec["paths"]["/decide"]["post"]
    assert {"400", "403", "413", "415", "422", "429", "503", "504"} <= set(operation["responses"])
    assert "64" in operation["description"]


def test_null_for_a_field_with_a_default_is_the_field_left_out(server: str,
                                                               checkpoint: Path) -> None:
    """Clients that write their unset optional fields as ``null`` got a 422 for ``"mode":
    null`` or ``"options": null`` though ``commit`` and ``max_steps`` took null as "the
    default"; every field with a default takes it now, and the schema says so."""
    body = _body()
    body["mode"] = None
    body["options"] = None
    nulls = httpx.post(f"{server}/decide", json=body, timeout=120)
    defaults = httpx.post(f"{server}/decide", json=_body(), timeout=120)
    assert nulls.status_code == defaults.status_code == 200, nulls.text
    assert nulls.json()["mode"] == "joint"
    assert [a["value"] for a in nulls.json()["answers"]] == [
        a["value"] for a in defaults.json()["answers"]]
    body["options"] = {"threshold": None, "return_probabilities": None, "score_options": None}
    assert httpx.post(f"{server}/decide", json=body, timeout=120).status_code == 200
    for field in ("document", "questions"):  # a required field's null is still refused
        refused = httpx.post(f"{server}/decide", json={**_body(), field: None}, timeout=120)
        assert refused.status_code == 422 and refused.json()["error"]["field"] == field
    spec = create_app(ServeSettings(model_path=str(checkpoint), include_apps=False)).openapi()
    schemas = spec["components"]["schemas"]
    for model, fields in (("DecideBody", ("mode", "options")),
                          ("DecideOptions", ("threshold", "return_probabilities", "commit"))):
        for field in fields:
            assert {"type": "null"} in schemas[model]["properties"][field]["anyOf"], field
        assert not any({"type": "null"} in prop.get("anyOf", ())
                       for name, prop in schemas[model]["properties"].items()
                       if name in schemas[model].get("required", ()))


_JSON = st.recursive(
    # JSON has no NaN or infinity: the client could not send them
    st.none() | st.booleans() | st.integers(-10**20, 10**20)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
_PATHS = [("document",), ("questions",), ("mode",), ("options",), ("options", "threshold"),
          ("options", "max_steps"), ("options", "return_probabilities"), ("options", "commit"),
          ("options", "score_options"), ("questions", 0),
          ("questions", 0, "id"), ("questions", 0, "text"), ("questions", 0, "answer"),
          ("questions", 0, "answer", "type"), ("questions", 2, "answer", "options"),
          ("questions", 1, "answer", "minimum"), ("questions", 1, "answer", "maximum")]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(_PATHS), value=_JSON)
def test_any_mutated_request_gets_a_json_answer_never_a_500(
    server: str, path: tuple[Any, ...], value: Any
) -> None:
    body = _body(max_steps=1)  # one denoising step: a mutation that stays valid decodes fast
    target: Any = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    response = httpx.post(f"{server}/decide", json=body, timeout=120)
    assert response.status_code in (200, 422), response.text
    data = response.json()
    if response.status_code == 422:
        assert set(data["error"]) == {"type", "message", "field", "request_id"}
        assert data["error"]["message"]
    else:
        assert len(data["answers"]) == len(body["questions"])


class _SlowPrepare(_SlowEngine):
    """Validation that takes as long as the test wants for one document (a schema slow to
    compile, say): that of "slow to validate" (``entered`` once begun) waits until the test
    opens ``release``."""

    def __init__(self, engine: ModelEngine) -> None:
        super().__init__(engine, delay_s=0.0)
        self.entered, self.release = threading.Event(), threading.Event()

    def prepare(self, body: Any) -> Any:
        if body.document == "slow to validate":
            self.entered.set()
            assert self.release.wait(60), "the test never released the validation"
        return self.inner.prepare(body)

    def decide_many(self, prepared: Sequence[Any]) -> list[Any]:
        return self.inner.decide_many(prepared)


def test_slow_validation_does_not_hold_up_other_requests(checkpoint: Path) -> None:
    engine = _SlowPrepare(ModelEngine.load(str(checkpoint)))
    try:
        with running_server(create_app(ServeSettings(include_apps=False), engine=engine)) as url:

            def send(document: str) -> int:
                response = httpx.post(f"{url}/decide", json=_body(document, max_steps=1),
                                      timeout=30)
                return response.status_code

            with ThreadPoolExecutor(max_workers=1) as pool:
                slow = pool.submit(send, "slow to validate")
                assert engine.entered.wait(30)
                # answered while the slow validation is held (until the test releases it
                # below): a validation that held up the others would leave this one waiting
                # until its client's timeout
                assert send("A quick one.") == 200
                assert not slow.done()
                engine.release.set()
                assert slow.result() == 200
    finally:
        engine.release.set()


class _LongDecode(_SlowEngine):
    """Decodes "long to decode" for up to ``delay_s`` in 10 ms steps, asking ``abandoned``
    before each as the model does, and stops once its caller has given up."""

    def __init__(self, engine: ModelEngine, delay_s: float) -> None:
        super().__init__(engine, delay_s)
        self.stopped = False  # given up before its end

    def decide_many(self, prepared: Sequence[Any], abandoned: Any = None) -> list[Any]:
        from decision.errors import DecodeAbandonedError

        if prepared[0].request.document == "long to decode":
            start = time.monotonic()
            while time.monotonic() - start < self.delay_s:
                if abandoned is not None and abandoned(0):
                    self.stopped = True
                    raise DecodeAbandonedError("abandoned")
                time.sleep(0.01)
        return self.inner.decide_many(prepared)


def test_a_client_that_disconnects_stops_its_decoding(checkpoint: Path) -> None:
    # A client that hung up used to have its request decoded to the end (up to --timeout): the
    # worker kept at it while every request behind it waited.
    engine = _LongDecode(ModelEngine.load(str(checkpoint)), delay_s=30.0)
    # a deadline past the 30 s of decoding: only the disconnect can stop it before its end
    settings = ServeSettings(max_batch_size=1, request_timeout_s=120, include_apps=False)
    with running_server(create_app(settings, engine=engine)) as url:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/decide", json=_body("long to decode"), timeout=1.0)
        quick = httpx.post(f"{url}/decide", json=_body("A quick one.", max_steps=1), timeout=60)
        assert quick.status_code == 200
        # counted as a client that went away, not as the 504 nobody received
        text = _metrics_when(url, 'decision_requests_total{outcome="disconnected"}')
        assert _metric(text, "decision_requests_total", 'outcome="disconnected"') == 1
        assert 'decision_requests_total{outcome="timeout"}' not in text
    assert engine.stopped  # its decoding was given up, not run to its end


def _metrics_when(url: str, needle: str, within_s: float = 5.0) -> str:
    """``/metrics`` once it holds ``needle`` (a request's outcome is counted when its handler
    ends, a moment after its client stopped waiting), or as it is after ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        text = httpx.get(f"{url}/metrics").text
        if needle in text or time.monotonic() > deadline:
            return text
        time.sleep(0.05)


def test_shutdown_answers_every_waiting_request(checkpoint: Path) -> None:
    # At shutdown uvicorn waits out its graceful time, then cancels the requests still waiting:
    # each got a bare "Internal Server Error" 500 (and a traceback in the log). Now the queued
    # ones are answered 503 as soon as shutdown begins, and the one being decided is answered
    # (200 if it finishes in time, else a JSON 503).
    from decision.serve.testing import started_server

    settings = ServeSettings(max_batch_size=1, max_wait_ms=0, include_apps=False)
    engine = _SlowEngine(ModelEngine.load(str(checkpoint)), delay_s=1.5)
    app = create_app(settings, engine=engine)
    with started_server(app, timeout=30, timeout_graceful_shutdown=1) as (url, server):

        def client(_: int) -> tuple[int, Any]:
            r = httpx.post(f"{url}/decide", json=_body(max_steps=1), timeout=60)
            return r.status_code, r.json()

        with ThreadPoolExecutor(max_workers=5) as pool:
            futures = [pool.submit(client, i) for i in range(5)]
            # shut down once every request has reached the service: a fixed 0.5 s was sometimes
            # too short on a loaded machine (a client not yet connected was refused)
            deadline = time.monotonic() + 20
            while engine.prepared < 5 and time.monotonic() < deadline:
                time.sleep(0.01)
            server.should_exit = True
            results = [f.result() for f in futures]
    # every request answered (none left to its client's timeout, none a bare 500), and at
    # least the 3 queued behind the one being decided refused, not decoded (1.5 s each) first
    statuses = sorted(status for status, _ in results)
    assert set(statuses) <= {200, 503}, results
    assert statuses.count(503) >= 3, results
    for status, data in results:
        if status == 503:
            assert data["error"]["type"] == "unavailable" and data["error"]["message"]


def test_a_schema_the_busy_machine_could_not_compile_is_503_then_compiles(
    checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compile's wall-time safety net tripping says the machine was busy, not that the
    schema is bad: 503 with Retry-After, and the same request succeeds once there is time."""
    from decision.schemas import regex_index

    body = _body(max_steps=1)
    body["questions"] = [_q("code", {"type": "pattern", "regex": "Z[0-9]{2}-[d-f]{3}",
                                     "max_tokens": 12}, "Code?")]
    with running_server(create_app(ServeSettings(include_apps=False),
                                   engine=ModelEngine.load(str(checkpoint)))) as url:
        monkeypatch.setattr(regex_index, "COMPILE_WALL_LIMIT_S", 0.0)
        busy = httpx.post(f"{url}/decide", json=body, timeout=60)
        assert busy.status_code == 503, busy.text
        assert busy.headers["retry-after"] == "1"
        error = busy.json()["error"]
        assert error["type"] == "unavailable" and "busy" in error["message"]
        assert error["field"] == "questions.0.answer.pattern.regex"
        monkeypatch.setattr(regex_index, "COMPILE_WALL_LIMIT_S", 60.0)
        again = httpx.post(f"{url}/decide", json=body, timeout=60)
        assert again.status_code == 200, again.text
        assert re.fullmatch("Z[0-9]{2}-[d-f]{3}", again.json()["answers"][0]["value"])


@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("GET", "/decide", "POST"),
    ("PUT", "/decide", "POST"),
    ("POST", "/health", "GET, HEAD"),  # HEAD /health is a route of its own
    ("DELETE", "/metrics", "GET"),
])
def test_a_wrong_method_is_405_naming_the_allowed_ones(
    server: str, method: str, path: str, allowed: str
) -> None:
    # the Allow header (RFC 9110 requires it on a 405) was dropped by the JSON error handler
    response = httpx.request(method, f"{server}{path}")
    assert response.status_code == 405
    assert response.headers["allow"] == allowed
    error = response.json()["error"]
    assert error["type"] == "method_not_allowed"
    assert method in error["message"] and path in error["message"]
    assert error["message"].endswith(f"allowed: {allowed}")


class _FakeEngine:
    """No model: ``prepare`` sleeps ``prepare_s`` (a slow schema compile) and counts its calls;
    ``decide_many`` answers every question ``True`` at once and records its batches."""

    name = "fake"

    def __init__(self, prepare_s: float) -> None:
        self.prepare_s = prepare_s
        self.prepared = 0
        self.batches: list[int] = []
        self._lock = threading.Lock()

    def prepare(self, body: Any) -> Any:
        with self._lock:
            self.prepared += 1
        time.sleep(self.prepare_s)
        return body

    def decide_many(self, prepared: Sequence[Any]) -> list[Any]:
        self.batches.append(len(prepared))
        return [_fake_decision(body) for body in prepared]

    def info(self) -> Any:
        raise AssertionError("the tests of this fake engine never ask for its info")


def _fake_decision(body: Any) -> SimpleNamespace:
    answers = [SimpleNamespace(id=q.id, value=True, text="yes", confidence=1.0,
                               option_probabilities=None) for q in body.questions]
    return SimpleNamespace(answers=answers, mode="joint", steps=1, tokens_per_forward=1.0,
                           timings={})


def test_timeout_covers_validation_and_nothing_late_is_compiled_or_queued() -> None:
    # --timeout was not enforced while a request was validated: 12 requests whose schemas took
    # 1.5 s each to compile, on the 4 validation threads, were all compiled (the last ones from
    # 3 s on) and answered 504 up to 5 s in, for a timeout of 2 s.
    from decision.serve.service import PREPARE_THREADS

    engine = _HeldEngine()  # each validation of "held" lasts until the test releases it
    settings = ServeSettings(request_timeout_s=1.0, include_apps=False)
    app = create_app(settings, engine=engine)
    clients = PREPARE_THREADS + 2
    try:
        with running_server(app) as url:

            def client(_: int) -> tuple[int, dict[str, Any]]:
                r = httpx.post(f"{url}/decide", json=_body("held"), timeout=30)
                return r.status_code, r.json()

            with ThreadPoolExecutor(max_workers=clients) as pool:
                results = list(pool.map(client, range(clients)))
            # every answer came while the validations were held (released only now): at the
            # deadline, not once validation is over (that would leave each client to its 30 s)
            started = engine.prepared
            engine.release.set()
            # the validations in progress end and free their threads: the late ones must not
            # start, and no result past its deadline may be queued
            service, deadline = app.state.service, time.monotonic() + 10
            while service._validating:
                assert time.monotonic() < deadline, "the released validations never ended"
                time.sleep(0.01)
            fresh = httpx.post(f"{url}/decide", json=_body("A quick one."), timeout=30)
            assert fresh.status_code == 200, fresh.text
    finally:
        engine.release.set()
    for status, data in results:
        assert status == 504, data
        assert data["error"]["type"] == "timeout"
    assert started == PREPARE_THREADS  # those that waited for a thread never started
    assert engine.prepared == PREPARE_THREADS + 1  # nor once a thread was free: the fresh one
    assert engine.batches == [1]  # and nothing past its deadline was queued: the fresh one


def test_shutdown_during_validation_is_a_json_503() -> None:
    # A request still being validated when the graceful-shutdown time ran out was cancelled
    # into uvicorn's bare "Internal Server Error" 500.
    from decision.serve.testing import started_server

    app = create_app(ServeSettings(include_apps=False), engine=_FakeEngine(prepare_s=4.0))
    with started_server(app, timeout=30, log_level="critical",
                        timeout_graceful_shutdown=1) as (url, server):
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(httpx.post, f"{url}/decide", json=_body(), timeout=30)
            time.sleep(0.5)
            server.should_exit = True
            response = pending.result()
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["type"] == "unavailable" and "shut down" in error["message"]
    assert response.headers["retry-after"] == "1"
    metrics = app.state.service.metrics
    assert metrics.requests.value(outcome="unavailable") == 1


class _HeldEngine(_FakeEngine):
    """``_FakeEngine`` whose validation of the document "held" waits until the test opens
    ``release``; ``entered`` counts the validations started."""

    def __init__(self) -> None:
        super().__init__(prepare_s=0.0)
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def prepare(self, body: Any) -> Any:
        prepared = super().prepare(body)
        if body.document == "held":
            self.entered.release()
            assert self.release.wait(60), "the test never released the validation"
        return prepared


def test_a_client_that_disconnects_during_validation_is_let_go_at_once() -> None:
    # The disconnect watch began only once a request was queued: a client that left while its
    # request was validated (or waited for a validation thread) was counted by the answer it
    # never got ("timeout" when its deadline passed meanwhile), and its request was validated,
    # then queued, all the same.
    import socket

    engine = _HeldEngine()
    app = create_app(ServeSettings(include_apps=False), engine=engine)
    metrics = app.state.service.metrics
    try:
        with running_server(app) as url:
            port = int(url.rsplit(":", 1)[1])
            payload = json.dumps(_body("held")).encode()
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(b"POST /decide HTTP/1.1\r\nhost: test\r\n"
                             b"content-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(payload), payload))
                assert engine.entered.acquire(timeout=10)  # its validation has begun
            # the client is gone, its validation still held: it is counted as gone at once
            deadline = time.monotonic() + 10
            while metrics.requests.value(outcome="disconnected") < 1:
                assert time.monotonic() < deadline, "the request still waits on its validation"
                time.sleep(0.01)
            engine.release.set()
            ok = httpx.post(f"{url}/decide", json=_body("A quick one."), timeout=30)
            assert ok.status_code == 200, ok.text
    finally:
        engine.release.set()
    assert metrics.requests.value(outcome="disconnected") == 1
    assert metrics.requests.value(outcome="timeout") == 0
    assert engine.batches == [1]  # the validated request of the gone client was never queued


def test_shutdown_answers_the_requests_being_validated_at_once() -> None:
    # A request still being validated when shutdown began could only be refused a place in the
    # queue: it was answered 503 only once its validation was over, or when the whole
    # graceful-shutdown time had run out (decision serve: 10 s) and its task was cancelled.
    from decision.serve.service import PREPARE_THREADS
    from decision.serve.testing import started_server

    engine = _HeldEngine()
    app = create_app(ServeSettings(include_apps=False), engine=engine)
    try:
        with started_server(app, timeout=30, log_level="critical",
                            timeout_graceful_shutdown=60) as (url, server):
            with ThreadPoolExecutor(max_workers=PREPARE_THREADS) as pool:
                pending = [pool.submit(httpx.post, f"{url}/decide", json=_body("held"),
                                       timeout=20) for _ in range(PREPARE_THREADS)]
                for _ in range(PREPARE_THREADS):
                    assert engine.entered.acquire(timeout=10)
                server.should_exit = True
                # answered while their validations are still held
                responses = [future.result() for future in pending]
            engine.release.set()
    finally:
        engine.release.set()
    for response in responses:
        assert response.status_code == 503, response.text
        assert response.json()["error"]["type"] == "unavailable"
    assert engine.batches == []


def _decide_body(document: str) -> Any:
    from decision.serve.api import DecideBody

    return DecideBody.model_validate(_body(document))


async def _status_of(task: Any) -> int:
    """The HTTP status ``task`` (a ``DecisionService.decide``) ends with, 10 s at most."""
    import asyncio

    from decision.serve.errors import ServiceError

    try:
        await asyncio.wait_for(task, 10)
    except ServiceError as exc:
        return exc.status
    return 200


async def _hold_every_thread(service: Any, engine: _HeldEngine) -> list[Any]:
    """Requests of the document "held", one on each validation thread, held there."""
    import asyncio

    from decision.serve.service import PREPARE_THREADS

    held = [asyncio.ensure_future(service.decide(_decide_body("held")))
            for _ in range(PREPARE_THREADS)]
    for _ in range(PREPARE_THREADS):
        assert await asyncio.to_thread(engine.entered.acquire, True, 10)
    return held


def test_requests_waiting_for_a_validation_thread_are_never_validated_once_given_up() -> None:
    # Nobody waits for such a request's validation any more: its client went away, or shutdown
    # began. It stayed waiting, and was validated once a thread was free.
    import asyncio

    from decision.serve.service import PREPARE_THREADS, DecisionService

    class Client:
        """The ASGI receive of a client that disconnects when ``leave`` is set."""

        def __init__(self) -> None:
            self.leave = asyncio.Event()

        async def receive(self) -> dict[str, Any]:
            await self.leave.wait()
            return {"type": "http.disconnect"}

    async def scenario() -> None:
        service = DecisionService(ServeSettings(include_apps=False))
        service.start(engine)
        try:
            held = await _hold_every_thread(service, engine)
            client = Client()
            leaving = asyncio.ensure_future(service.decide(_decide_body("leaves"), client))  # type: ignore[arg-type]
            await asyncio.sleep(0)  # it waits for a validation thread now
            client.leave.set()
            assert await _status_of(leaving) == 504  # let go at once, every thread still held
            engine.release.set()
            assert [await _status_of(task) for task in held] == [200] * PREPARE_THREADS
            # validated after anything queued before it: the request of the gone client too
            assert await _status_of(service.decide(_decide_body("last"))) == 200
            assert engine.prepared == PREPARE_THREADS + 1  # never the gone client's

            engine.release.clear()
            held = await _hold_every_thread(service, engine)
            stopped = asyncio.ensure_future(service.decide(_decide_body("stopped")))
            await asyncio.sleep(0)  # it waits for a validation thread now
            service.begin_shutdown()
            # answered at once, as are the ones being validated: none could be queued now
            assert await _status_of(stopped) == 503
            assert [await _status_of(task) for task in held] == [503] * PREPARE_THREADS
        finally:
            engine.release.set()
            await asyncio.to_thread(service.stop)

    engine = _HeldEngine()
    asyncio.run(scenario())


def test_a_service_started_again_is_no_longer_shutting_down() -> None:
    # start() after a shutdown (a second lifespan on the same service) kept shutting_down set,
    # so a request cancelled by its server was answered 503 "shutting down" instead of being
    # let go as cancelled
    import asyncio

    from decision.serve.service import DecisionService

    engine = _HeldEngine()

    async def scenario() -> None:
        service = DecisionService(ServeSettings(include_apps=False))
        service.start(engine)
        service.begin_shutdown()
        await asyncio.to_thread(service.stop)
        service.start(engine)
        try:
            assert not service.shutting_down
            task = asyncio.ensure_future(service.decide(_decide_body("held")))
            assert await asyncio.to_thread(engine.entered.acquire, True, 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            engine.release.set()
            await asyncio.to_thread(service.stop)

    asyncio.run(scenario())


def test_the_validation_backlog_is_bounded_by_the_queue_size() -> None:
    # Only the queue after validation was bounded: under overload the requests waiting for a
    # validation thread piled up without limit, each answered 504 at its deadline instead of a
    # 429 at once.
    import asyncio

    from decision.serve.errors import ServiceError
    from decision.serve.service import PREPARE_THREADS, DecisionService

    engine = _HeldEngine()

    async def scenario() -> None:
        settings = ServeSettings(include_apps=False, queue_size=PREPARE_THREADS + 1)
        service = DecisionService(settings)
        service.start(engine)
        try:
            held = await _hold_every_thread(service, engine)
            waiting = asyncio.ensure_future(service.decide(_decide_body("waits")))  # for a thread
            await asyncio.sleep(0)
            with pytest.raises(ServiceError) as refused:  # one more than --queue-size
                await asyncio.wait_for(service.decide(_decide_body("one too many")), 5)
            assert refused.value.status == 429 and "being validated" in refused.value.message
            engine.release.set()
            assert [await _status_of(t) for t in [*held, waiting]] == [200] * (PREPARE_THREADS + 1)
            assert service._validating == 0  # every validation counted out
            assert await _status_of(service.decide(_decide_body("later"))) == 200
        finally:
            engine.release.set()
            await asyncio.to_thread(service.stop)

    asyncio.run(scenario())


# --- The HTTP layer with a fake engine (no model, no server): fast checks of the edges ---------


def _fake_client(max_body: int = 1024, crash: bool = False) -> Any:
    from fastapi.testclient import TestClient

    engine = _FakeEngine(prepare_s=0.0)
    if crash:
        def broken(prepared: Sequence[Any]) -> list[Any]:
            raise RuntimeError("the engine broke")
        engine.decide_many = broken  # type: ignore[method-assign]
    settings = ServeSettings(include_apps=False, max_body_bytes=max_body)
    return TestClient(create_app(settings, engine=engine), raise_server_exceptions=False)


def test_the_body_limit_is_inclusive_for_a_declared_and_a_chunked_body() -> None:
    """A body of exactly ``--max-body-bytes`` is read; one byte more is 413, whether its length
    is declared or it is chunked (counted as it streams, not only once twice the limit)."""
    limit = 1024
    json_ = {"content-type": "application/json"}
    with _fake_client(max_body=limit) as client:
        exact = json.dumps(_body()).encode()
        exact = exact[:-1] + b" " * (limit - len(exact)) + b"}"  # pad to the limit
        assert len(exact) == limit and json.loads(exact)
        assert client.post("/decide", content=exact, headers=json_).status_code == 200
        r = client.post("/decide", content=exact[:-1] + b" }", headers=json_)
        assert r.status_code == 413 and r.json()["error"]["type"] == "payload_too_large"
        r = client.post("/decide", content=iter([exact]), headers=json_)
        assert r.status_code == 200, r.text
        over = exact[:-1] + b" " * (limit // 2) + b"}"  # 1.5 times the limit, in two chunks
        r = client.post("/decide", content=iter([over[:limit], over[limit:]]), headers=json_)
        assert r.status_code == 413 and r.json()["error"]["type"] == "payload_too_large"


def test_a_validation_error_names_the_field_without_body_and_counts_the_others() -> None:
    with _fake_client() as client:
        q = {"id": "a", "answer": {"type": "boolean"}}  # no "text"
        r = client.post("/decide", json={"document": "d", "questions": [q, {**q, "id": "b"}]})
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert err["type"] == "validation_error" and err["field"] == "questions.0.text"
        assert err["message"].startswith("questions.0.text: ")
        assert err["message"].endswith(" (and 1 more problem)"), err["message"]
        three = [q, {**q, "id": "b"}, {**q, "id": "c"}]
        r = client.post("/decide", json={"document": "d", "questions": three})
        assert r.json()["error"]["message"].endswith(" (and 2 more problems)"), r.text


def test_a_405_sends_the_allow_header_of_every_route_on_the_path() -> None:
    """``HEAD /health`` answers 200 (a route of its own), but a 405 there named only ``GET``:
    Starlette takes the first matching route's methods."""
    with _fake_client() as client:
        assert client.head("/health").status_code == 200
        r = client.delete("/health")
        assert r.status_code == 405 and r.json()["error"]["type"] == "method_not_allowed"
        assert r.headers["allow"] == "GET, HEAD", r.headers
        assert r.json()["error"]["message"].endswith("; allowed: GET, HEAD")


def test_decide_outcomes_count_a_crash_as_error_and_a_cross_site_write_as_invalid() -> None:
    with _fake_client(crash=True) as client:
        metrics = client.app.state.service.metrics
        r = client.post("/decide", json=_body())
        assert r.status_code == 500 and r.json()["error"]["type"] == "internal_error"
        r = client.post("/decide", json=_body(), headers={"sec-fetch-site": "cross-site"})
        assert r.status_code == 403, r.text
        assert metrics.requests.value(outcome="error") == 1
        assert metrics.requests.value(outcome="invalid") == 1
        assert metrics.latency.count(outcome="invalid") == 1


def test_health_says_degraded_while_the_model_is_not_loaded() -> None:
    client = _fake_client()  # not started: no lifespan, no model
    body = client.get("/health").json()
    assert body["status"] == "degraded" and body["model_loaded"] is False, body
    with client:
        body = client.get("/health").json()
        assert body["status"] == "ok" and body["model_loaded"] is True, body


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_every_write_method_sent_cross_site_is_refused(method: str) -> None:
    """Not only POST: a route taking PUT, PATCH or DELETE is refused the same way, and the
    header's value is matched whatever its case."""
    client = _fake_client()

    @client.app.api_route("/thing", methods=["PUT", "PATCH", "DELETE"])
    async def thing() -> dict[str, str]:
        return {"done": "yes"}

    for site in ("cross-site", "Cross-Site"):
        r = client.request(method, "/thing", headers={"sec-fetch-site": site})
        assert r.status_code == 403 and r.json()["error"]["type"] == "cross_site_request"
    r = client.request(method, "/thing", headers={"sec-fetch-site": "same-origin"})
    assert r.status_code == 200, r.text
    r = client.get("/thing")  # and its 405 names the methods sorted, in Allow as in the message
    assert r.status_code == 405 and r.headers["allow"] == "DELETE, PATCH, PUT", r.headers
    assert r.json()["error"]["message"].endswith("; allowed: DELETE, PATCH, PUT")


def test_prometheus_buckets_include_their_bound_and_labels_are_escaped() -> None:
    """``le`` is "less than or equal": a value on a bound counts in that bound's bucket; a label
    value's backslash, quote and newline are escaped so the line stays one line."""
    from decision.serve.metrics import Counter, Histogram

    h = Histogram("h", "help", (1.0, 2.0))
    h.observe(1.0)
    lines = h.render()
    assert 'h_bucket{le="1"} 1' in lines and 'h_bucket{le="2"} 1' in lines, lines
    c = Counter("c", "help", ("outcome",))
    c.inc(outcome='a"b\\c\nd')
    assert c.render()[-1] == 'c{outcome="a\\"b\\\\c\\nd"} 1', c.render()
