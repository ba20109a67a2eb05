"""HTTP service: FastAPI app, one worker thread that owns the model, batched decisions.

The names below load on first use: ``decision --help`` imports this package's ``command``
module, and the app's imports (FastAPI, torch) took seconds of every command's start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decision.lazy import lazy_attributes

if TYPE_CHECKING:
    from decision.serve.app import APP_MODULES, create_app
    from decision.serve.settings import ServeSettings

_EXPORTS = {"APP_MODULES": "decision.serve.app", "create_app": "decision.serve.app",
            "ServeSettings": "decision.serve.settings"}

__all__ = ["APP_MODULES", "ServeSettings", "create_app"]
__getattr__ = lazy_attributes(__name__, _EXPORTS)
