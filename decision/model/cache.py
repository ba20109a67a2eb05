"""HistoryCache: what the causal history path leaves behind for the block path.

Per row: ``lengths[b]`` history tokens. Per GDN layer: the delta-rule state ``state``
[B, Hv, Dk, Dv] (fp32) and the convolution tail ``conv_tail`` [B, C, K-1] (the last K-1
pre-convolution q/k/v features of each row, zeros before the first token). Per attention layer:
``key``/``value`` [B, Hkv, T, D] (keys after q/k-norm and RoPE), valid where ``t < lengths[b]``.
Every tensor is treated as immutable: ``denoise`` reads it, ``commit`` builds a new cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from decision.errors import DecisionInputError


@dataclass(frozen=True)
class GDNCache:
    """State of one Gated DeltaNet layer."""

    state: torch.Tensor  # [B, Hv, Dk, Dv] fp32
    conv_tail: torch.Tensor  # [B, C, K - 1]

    def index_select(self, rows: torch.Tensor) -> GDNCache:
        return GDNCache(self.state.index_select(0, rows), self.conv_tail.index_select(0, rows))


@dataclass(frozen=True)
class AttentionCache:
    """Keys and values of one gated attention layer (right-padded, valid below ``lengths``)."""

    key: torch.Tensor  # [B, Hkv, T, D]
    value: torch.Tensor  # [B, Hkv, T, D]

    def index_select(self, rows: torch.Tensor) -> AttentionCache:
        return AttentionCache(self.key.index_select(0, rows), self.value.index_select(0, rows))


LayerCache = GDNCache | AttentionCache


@dataclass(frozen=True)
class HistoryCache:
    """Per-row history lengths and one entry per layer (see module docstring)."""

    lengths: torch.Tensor  # [B] int64
    layers: tuple[LayerCache, ...]

    @property
    def batch_size(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def max_length(self) -> int:
        return int(self.lengths.max().item()) if self.batch_size else 0

    def index_select(self, rows: torch.Tensor | list[int]) -> HistoryCache:
        """The cache of the given rows (repeats allowed: one document, several questions)."""
        try:  # a list on the CPU first, where its range is checked without a sync
            rows_t = torch.as_tensor(rows)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise DecisionInputError(f"rows must be a list of row indices: {exc}", "rows") from None
        if rows_t.numel() == 0:  # [] reads as float: no rows, an empty cache
            rows_t = rows_t.long().reshape(0)
        if rows_t.dim() != 1 or rows_t.dtype.is_floating_point or rows_t.dtype == torch.bool:
            raise DecisionInputError(f"rows must be a list of row indices, got {rows!r}", "rows")
        # the range on the CPU only: of a tensor on an accelerator it would cost two syncs a
        # denoising step (the engine selects rows of one there), and torch refuses those itself
        if rows_t.device.type == "cpu" and rows_t.numel() and (
                int(rows_t.min()) < 0 or int(rows_t.max()) >= self.batch_size):
            raise DecisionInputError(
                f"rows must be in [0, {self.batch_size}) (the cache's rows), got {rows!r}", "rows"
            )
        rows_t = rows_t.to(self.lengths.device, torch.long)
        layers = tuple(layer.index_select(rows_t) for layer in self.layers)
        lengths = self.lengths.index_select(0, rows_t)
        return HistoryCache(lengths, _trim(layers, int(lengths.max().item()) if len(rows_t) else 0))

    def nbytes(self) -> int:
        """Memory held by the cache tensors, for reporting."""
        total = 0
        for layer in self.layers:
            for t in (
                (layer.state, layer.conv_tail)
                if isinstance(layer, GDNCache)
                else (layer.key, layer.value)
            ):
                total += t.numel() * t.element_size()
        return total


def _trim(layers: tuple[LayerCache, ...], length: int) -> tuple[LayerCache, ...]:
    """Drop attention positions beyond ``length`` (all padding after a row selection)."""
    out: list[LayerCache] = []
    for layer in layers:
        if isinstance(layer, AttentionCache) and layer.key.shape[2] > length:
            layer = AttentionCache(layer.key[:, :, :length], layer.value[:, :, :length])
        out.append(layer)
    return tuple(out)
