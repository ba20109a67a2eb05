"""What training needs of a model: the :class:`TrainableModel` protocol.

The optimiser set-up, the step loss, the checkpoint writer and the loop all take the backbone
through it, so each can be tested with a stand-in model; it lives apart from them so that none
imports another just for the type.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import torch


class TrainableModel(Protocol):
    """What training needs from the backbone (``decision.model.DecisionModel`` satisfies it)."""

    def __call__(
        self,
        history_ids: torch.Tensor,
        block_ids: torch.Tensor,
        history_mask: torch.Tensor | None = None,
        block_mask: torch.Tensor | None = None,
        history_segments: torch.Tensor | None = None,
        block_segments: torch.Tensor | None = None,
    ) -> torch.Tensor: ...

    def parameters(self) -> Any: ...

    def named_parameters(self) -> Any: ...

    def train(self, mode: bool = True) -> Any: ...

    def state_dict(self) -> dict[str, torch.Tensor]: ...

    def save(self, path: str | Path) -> None: ...

    def to(self, device: torch.device) -> Any: ...
