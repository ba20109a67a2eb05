"""``decision serve``: run the HTTP service with uvicorn."""

from __future__ import annotations

import argparse
import copy
import sys
from typing import Any

from decision.errors import CheckpointError, DecisionError
from decision.serve.settings import InvalidSettings, ServeSettings, check_bindable


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve", help="run the HTTP service (POST /decide, /health, /metrics, /docs)",
        description="Serve decisions over HTTP. The model is loaded once, owned by one worker "
        "thread, and requests waiting together are decided in one batch.",
    )
    d = ServeSettings()
    p.add_argument("--model", metavar="DIR", default=None,
                   help="checkpoint directory (default: the shipped models/default)")
    p.add_argument("--device", default=d.device, help="torch device (default: %(default)s)")
    p.add_argument("--host", default=d.host, help="bind address (default: %(default)s)")
    p.add_argument("--port", type=int, default=d.port, help="port (default: %(default)s)")
    p.add_argument("--max-batch-size", type=int, default=d.max_batch_size,
                   help="requests decided together at most (default: %(default)s)")
    p.add_argument("--max-wait-ms", type=float, default=d.max_wait_ms,
                   help="how long the worker collects a batch (default: %(default)s)")
    p.add_argument("--no-batching", action="store_true",
                   help="decide every request alone (same as --max-batch-size 1)")
    p.add_argument("--queue-size", type=int, default=d.queue_size,
                   help="requests waiting at most before 429, and being validated at most "
                        "(default: %(default)s)")
    p.add_argument("--timeout", type=float, default=d.request_timeout_s,
                   help="seconds before a request is answered 504 (default: %(default)s)")
    p.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes,
                   help="largest request body before 413 (default: %(default)s)")
    p.add_argument("--no-apps", action="store_true", help="do not mount the demo apps")
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=run)


# the flag that sets each ServeSettings field, for errors in the user's words
FLAGS = {"model_path": "--model", "device": "--device", "host": "--host", "port": "--port",
         "max_batch_size": "--max-batch-size", "max_wait_ms": "--max-wait-ms",
         "queue_size": "--queue-size", "request_timeout_s": "--timeout",
         "max_body_bytes": "--max-body-bytes"}


def settings_error(exc: InvalidSettings) -> str:
    """``--timeout 0.0: must be a number > 0`` for each bad setting, as the user typed it."""
    return "; ".join(f"{FLAGS.get(name, name)} {value!r}: must be {must}"
                     for name, value, must in exc.problems)


def settings_from_args(args: argparse.Namespace) -> ServeSettings:
    return ServeSettings(
        model_path=args.model,
        device=args.device,
        host=args.host,
        port=args.port,
        max_batch_size=1 if args.no_batching else args.max_batch_size,
        max_wait_ms=args.max_wait_ms,
        queue_size=args.queue_size,
        request_timeout_s=args.timeout,
        max_body_bytes=args.max_body_bytes,
        include_apps=not args.no_apps,
    )


def log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging configuration, with the service's own loggers (``decision.*``: the
    worker's warnings, the model loaded) on its handler and format at ``--log-level`` too.
    Without them they went to Python's last-resort handler: bare lines, at WARNING whatever
    ``--log-level`` said (``info`` never showed, ``error`` did not quiet them)."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["decision"] = {
        "handlers": ["default"], "level": level.upper(), "propagate": False,
    }
    return config


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from decision.serve.app import (
        ServiceServer,
        check_app_settings,
        create_app,
        default_engine_factory,
    )

    try:
        settings = settings_from_args(args)
        if settings.include_apps:
            check_app_settings()
        # the address too, so a port in use is not found only after the model has loaded
        check_bindable(settings.host, settings.port)
    except InvalidSettings as exc:
        print(f"decision serve: {settings_error(exc)}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"decision serve: {exc}", file=sys.stderr)
        return 2
    # Load before binding the port, so a missing or broken checkpoint is one clear message and a
    # non-zero exit rather than a server that starts and then fails its lifespan. The loaded
    # engine is handed to the app, whose worker thread then owns it.
    # A load that fails is reported by decision.cli.exit_status as a CheckpointError ("decision
    # serve: cannot load the model: ...", status 2), which also tells a Ctrl-C that native code
    # turned into a read error (status 130, "interrupted"); reported here, that was status 2.
    try:
        engine = default_engine_factory(settings)
    except CheckpointError:
        raise
    except (DecisionError, OSError) as exc:
        raise CheckpointError(str(exc)) from exc
    app = create_app(settings, engine=engine)
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level=args.log_level,
        log_config=log_config(args.log_level), lifespan="on", timeout_graceful_shutdown=10,
    )
    server = ServiceServer(config)
    server.run()
    return 0 if server.started else 1
