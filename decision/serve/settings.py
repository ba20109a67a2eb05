"""Settings of the HTTP service: where the model is, batching, queue, timeouts and body size."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ServeSettings:
    """Everything ``create_app`` and ``decision serve`` can be told.

    ``max_batch_size`` = 1 turns batching off (each request is decided alone);
    ``max_wait_ms`` is how long the worker keeps collecting after the first waiting request.
    """

    model_path: str | None = None  # None: the shipped default model (models/default)
    device: str = "cpu"
    host: str = "127.0.0.1"
    port: int = 8000
    max_batch_size: int = 16
    max_wait_ms: float = 5.0
    queue_size: int = 256
    request_timeout_s: float = 60.0
    max_body_bytes: int = 1_000_000
    include_apps: bool = True  # mount the demo apps listed in decision.serve.app.APP_MODULES

    def __post_init__(self) -> None:
        checks = {
            "max_batch_size": self.max_batch_size >= 1,
            "max_wait_ms": math.isfinite(self.max_wait_ms) and self.max_wait_ms >= 0,
            "queue_size": self.queue_size >= 1,
            "request_timeout_s": self.request_timeout_s > 0,
            "max_body_bytes": self.max_body_bytes >= 1024,
            "port": 0 <= self.port <= 65535,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            values = ", ".join(f"{name}={getattr(self, name)!r}" for name in bad)
            raise ValueError(f"invalid service settings: {values}")
