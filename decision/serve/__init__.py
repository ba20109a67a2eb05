"""HTTP service: FastAPI app, one worker thread that owns the model, batched decisions.

The names below load on first use: ``decision --help`` imports this package's ``command``
module, and the app's imports (FastAPI, torch) took seconds of every command's start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from decision.serve.app import APP_MODULES, create_app
    from decision.serve.settings import ServeSettings

_EXPORTS = {"APP_MODULES": "decision.serve.app", "create_app": "decision.serve.app",
            "ServeSettings": "decision.serve.settings"}

__all__ = ["APP_MODULES", "ServeSettings", "create_app"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
