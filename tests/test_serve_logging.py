"""What the service logs: a crash once with its traceback, its own messages at ``--log-level``."""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

import httpx
import pytest

from decision.cli import main
from decision.serve import ServeSettings, create_app
from decision.serve.app import ServiceServer
from decision.serve.engine import ModelEngine
from decision.serve.testing import running_server

BODY = {"document": "A document.", "questions": [
    {"id": "a", "text": "Is it so?", "answer": {"type": "boolean"}}]}


class _CrashingEngine:
    """Validates everything, then fails every decision: a fault of the service (a 500)."""

    name = "crashing"

    def prepare(self, body: Any) -> Any:
        return body

    def decide_many(self, prepared: Sequence[Any]) -> Sequence[Any]:
        raise RuntimeError("the engine broke")

    def info(self) -> Any:
        raise AssertionError("never asked")


def test_a_crash_is_logged_once_with_its_traceback(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The error handler logged the traceback, and then uvicorn logged it again ("Exception in
    ASGI application"): Starlette raises the exception on after the handler's 500."""
    app = create_app(ServeSettings(include_apps=False), engine=_CrashingEngine())
    with caplog.at_level(logging.DEBUG), running_server(app) as url:
        r = httpx.post(f"{url}/decide", json=BODY, timeout=30)
    assert r.status_code == 500 and r.json()["error"]["type"] == "internal_error"
    # uvicorn's loggers write to stderr; others reach the root logger (pytest's handler there)
    err = capfd.readouterr().err
    logged = [record for record in caplog.records if record.exc_info]
    assert err.count("Traceback (most recent call last)") + len(logged) == 1, (err, logged)
    assert "RuntimeError: the engine broke" in err


def test_serve_logs_its_own_messages_at_the_log_level(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The service's loggers (``decision.*``) had no handler under ``decision serve``: their
    warnings went out as bare lines whatever ``--log-level`` said, their info never."""
    logger = logging.getLogger("decision")
    for attr in ("handlers", "level", "propagate", "disabled"):  # put back after the test
        monkeypatch.setattr(logger, attr, copy.copy(getattr(logger, attr)))
    monkeypatch.setattr(ModelEngine, "load", lambda *args, **kwargs: _CrashingEngine())

    def run(self: ServiceServer, sockets: Any = None) -> None:
        worker = logging.getLogger("decision.serve.worker")
        worker.info("an info")
        worker.warning("a warning")
        worker.error("an error")
        self.started = True

    monkeypatch.setattr(ServiceServer, "run", run)
    assert main(["serve", "--no-apps", "--port", "0", "--log-level", "error"]) == 0
    err = capsys.readouterr().err
    assert "an info" not in err and "a warning" not in err
    assert [line.split() for line in err.splitlines()] == [["ERROR:", "an", "error"]]
    assert main(["serve", "--no-apps", "--port", "0", "--log-level", "info"]) == 0
    lines = [line.split(maxsplit=1) for line in capsys.readouterr().err.splitlines()]
    assert lines == [["INFO:", "an info"], ["WARNING:", "a warning"], ["ERROR:", "an error"]]
