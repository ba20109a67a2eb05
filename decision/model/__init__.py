"""The bidirectional Gated DeltaNet block-diffusion backbone (DESIGN.md sec. 2)."""

from decision.model.backbone import DecisionModel
from decision.model.cache import AttentionCache, GDNCache, HistoryCache
from decision.model.checkpoint import load_model, read_config, save_checkpoint
from decision.model.config import DecisionConfig

__all__ = [
    "AttentionCache",
    "DecisionConfig",
    "DecisionModel",
    "GDNCache",
    "HistoryCache",
    "load_model",
    "read_config",
    "save_checkpoint",
]
