"""Joint-mode structured decision service on a bidirectional Gated DeltaNet block-diffusion model.

``decision.load_model`` and the model classes are imported lazily, so that light modules
(``decision.errors``, the schemas) do not pull in torch.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "load_model": "decision.model",
    "DecisionModel": "decision.model",
    "DecisionConfig": "decision.model",
    "HistoryCache": "decision.model",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'decision' has no attribute {name!r}")
