"""Joint-mode structured decision service on a bidirectional Gated DeltaNet block-diffusion model.

``decision.load_model`` and the model classes are imported lazily, so that light modules
(``decision.errors``, the schemas) do not pull in torch.
"""

from __future__ import annotations

from decision.lazy import lazy_attributes

_LAZY = {
    "load_model": "decision.model",
    "DecisionModel": "decision.model",
    "DecisionConfig": "decision.model",
    "HistoryCache": "decision.model",
}

__all__ = sorted(_LAZY)
__getattr__ = lazy_attributes(__name__, _LAZY)
