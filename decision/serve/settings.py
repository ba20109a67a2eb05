"""Settings of the HTTP service: where the model is, batching, queue, timeouts and body size."""

from __future__ import annotations

import errno
import math
import os
import socket
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
        checks = {  # name: (valid, what it must be)
            # "" is not the default (None): it would be read as the working directory
            "model_path": (self.model_path is None or bool(self.model_path.strip()),
                           "a checkpoint directory"),
            # "" would bind every interface (0.0.0.0 and ::), not the default 127.0.0.1
            "host": (bool(self.host.strip()), "an address, 0.0.0.0 for every interface"),
            "max_batch_size": (self.max_batch_size >= 1, "at least 1"),
            "max_wait_ms": (math.isfinite(self.max_wait_ms) and self.max_wait_ms >= 0,
                            "a finite number >= 0"),
            "queue_size": (self.queue_size >= 1, "at least 1"),
            "request_timeout_s": (self.request_timeout_s > 0, "a number > 0"),
            "max_body_bytes": (self.max_body_bytes >= 1024, "at least 1024"),
            "port": (0 <= self.port <= 65535, "0 to 65535"),
        }
        bad = [(name, getattr(self, name), must) for name, (ok, must) in checks.items() if not ok]
        if bad:
            raise InvalidSettings(bad)


class InvalidSettings(ValueError):
    """Settings that cannot serve: ``problems`` holds (field, value, what it must be), so that
    ``decision serve`` can name the flag typed rather than the field."""

    def __init__(self, problems: list[tuple[str, object, str]]) -> None:
        self.problems = problems
        values = ", ".join(f"{name}={value!r} (must be {must})" for name, value, must in problems)
        super().__init__(f"invalid service settings: {values}")


def check_bindable(host: str, port: int) -> None:
    """Raise ``ValueError`` (one line) unless ``host``:``port`` can be bound now, as uvicorn will
    bind it (every address ``host`` resolves to, ``SO_REUSEADDR`` as asyncio sets it).

    ``decision serve`` calls it before it loads the model: a port in use or a ``--host`` that is
    not an address of this machine is one line and status 2 at once, not uvicorn's log lines and
    status 3 after the model has loaded. Binds nothing that stays bound (a race with another
    program for the port is still uvicorn's error)."""
    where = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ValueError(f"cannot listen on {where}: no such host ({reason})") from None
    bound, refused = 0, None
    for family, kind, proto, _, address in dict.fromkeys(infos):
        try:
            sock = socket.socket(family, kind, proto)
        except OSError:  # a family this machine does not have (asyncio skips it too)
            continue
        with sock:
            if os.name == "posix":  # as asyncio's create_server (elsewhere it means sharing)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPV6_V6ONLY"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
                bound += 1
            except OSError as exc:
                reason = (exc.strerror or str(exc)).lower()
                if exc.errno == errno.EADDRNOTAVAIL:  # asyncio skips it if another one binds
                    refused = refused or reason
                    continue
                raise ValueError(f"cannot listen on {where}: {reason}") from None
    if not bound:
        raise ValueError(f"cannot listen on {where}: {refused or 'no address to bind'}")
