"""HTTP service: FastAPI app, one worker thread that owns the model, batched decisions."""

from decision.serve.app import APP_MODULES, create_app
from decision.serve.settings import ServeSettings

__all__ = ["APP_MODULES", "ServeSettings", "create_app"]
