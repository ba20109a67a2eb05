"""DecisionModel: the hybrid GDN / gated-attention stack with history and block paths.

Module names mirror Qwen3_5MoeForCausalLM (``model.embed_tokens``, ``model.layers.N.*``,
``model.norm``, ``lm_head``) so that state-dict keys are the checkpoint names.
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from decision.errors import DecisionInputError
from decision.model.attention import GatedAttention
from decision.model.cache import AttentionCache, GDNCache, HistoryCache, LayerCache
from decision.model.config import LINEAR, DecisionConfig
from decision.model.gdn import GatedDeltaNet
from decision.model.mlp import MLP, SparseMoE
from decision.model.norms import ZeroCenteredRMSNorm
from decision.model.rope import RotaryEmbedding

if TYPE_CHECKING:
    import tokenizers


class DecoderLayer(nn.Module):
    """Pre-norm residual layer: token mixer (GDN or attention) then MoE / dense MLP."""

    def __init__(self, config: DecisionConfig, index: int, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.is_linear = config.layer_types[index] == LINEAR
        if self.is_linear:
            self.linear_attn = GatedDeltaNet(config)
        else:
            self.self_attn = GatedAttention(config, rotary)
        if config.layer_is_moe(index):
            self.mlp: nn.Module = SparseMoE(config)
        else:
            self.mlp = MLP(config.hidden_size, config.intermediate_size)
        self.input_layernorm = ZeroCenteredRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = ZeroCenteredRMSNorm(config.hidden_size,
                                                            config.rms_norm_eps)

    def empty_cache(self, batch: int, device: torch.device, dtype: torch.dtype) -> LayerCache:
        mixer = self.linear_attn if self.is_linear else self.self_attn
        return mixer.empty_cache(batch, device, dtype)

    def _ffn(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.mlp(self.post_attention_layernorm(h))

    def history(
        self, h: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor, cache: LayerCache,
        ffn: bool = True,
    ) -> tuple[torch.Tensor, LayerCache]:
        """Causal pass; ``ffn=False`` skips the feed-forward (the last layer of a prefill, whose
        output nothing reads: the cache comes from the token mixer)."""
        x = self.input_layernorm(h)
        if isinstance(cache, GDNCache):
            y, new = self.linear_attn.history(x, mask, cache)
        else:
            y, new = self.self_attn.history(x, mask, lengths, cache)
        return (self._ffn(h + y) if ffn else h + y), new

    def block(
        self, h: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor, cache: LayerCache
    ) -> torch.Tensor:
        x = self.input_layernorm(h)
        if isinstance(cache, GDNCache):
            y = self.linear_attn.block(x, mask, cache)
        else:
            y = self.self_attn.block(x, mask, lengths, cache)
        return self._ffn(h + y)


class TextModel(nn.Module):
    """Embeddings (+ zero-initialised segment embedding), layers and the final norm."""

    def __init__(self, config: DecisionConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.segment_embed = nn.Embedding(config.num_segments, config.hidden_size)
        nn.init.zeros_(self.segment_embed.weight)
        self.rotary_emb = RotaryEmbedding(config.rotary_dim, config.rope_theta)
        self.layers = nn.ModuleList(
            DecoderLayer(config, i, self.rotary_emb) for i in range(config.num_hidden_layers)
        )
        self.norm = ZeroCenteredRMSNorm(config.hidden_size, config.rms_norm_eps)

    def embed(self, ids: torch.Tensor, segments: torch.Tensor | None) -> torch.Tensor:
        h = self.embed_tokens(ids)
        if segments is not None:
            h = h + self.segment_embed(segments).to(h.dtype)
        return h


class DecisionModel(nn.Module):
    """The backbone with its public API (docs/interfaces.md, "Backbone")."""

    def __init__(
        self, config: DecisionConfig, tokenizer: tokenizers.Tokenizer | None = None
    ) -> None:
        super().__init__()
        self.config = config
        self.model = TextModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.tokenizer = tokenizer
        self.missing_block_params: list[str] = []
        self._init_weights()

    def _init_weights(self) -> None:
        """Normal(0, 0.02) for linears, embeddings and routers as transformers does; norms, GDN
        decay parameters and the block-path parameters keep the values their modules set."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, SparseMoE):
                nn.init.normal_(module.gate.weight, std=0.02)
        nn.init.normal_(self.model.embed_tokens.weight, std=0.02)
        for module in self.modules():
            if isinstance(module, GatedDeltaNet):
                module.reset_block_parameters()

    # ------------------------------------------------------------------ properties / io
    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    def save(self, path: str | Path, max_shard_size: int | str | None = None) -> None:
        """Write config.json, safetensors (sharded above ``max_shard_size``) and tokenizer.json."""
        from decision.model.checkpoint import save_checkpoint

        save_checkpoint(self, path, max_shard_size=max_shard_size)

    def set_kernel_backend(self, backend: str) -> None:
        """Run every GDN layer's ops (decision.kernels) on "auto", "triton" or "torch"."""
        if backend not in ("auto", "triton", "torch"):
            raise DecisionInputError(
                f"kernel backend must be 'auto', 'triton' or 'torch', got {backend!r}", "backend"
            )
        for module in self.modules():
            if isinstance(module, GatedDeltaNet):
                module.kernel_backend = backend

    # ------------------------------------------------------------------ input checks
    def _ids(self, ids: Any, name: str) -> torch.Tensor:
        if not isinstance(ids, torch.Tensor):
            # without a dtype, so that floats stay floats and are refused below (a long
            # conversion would truncate 2.5 to token 2); an empty list stays an empty batch
            ids = _as_tensor(ids, name, "an int tensor [B, T]")
            if ids.numel() == 0:
                ids = ids.long()
        if ids.dim() != 2 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
            raise DecisionInputError(
                f"{name} must be an integer tensor [B, T], got {ids.dtype} {tuple(ids.shape)}", name
            )
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.config.vocab_size):
            raise DecisionInputError(
                f"{name} has token ids outside [0, {self.config.vocab_size})", name
            )
        return ids.to(self.device, torch.long)

    def _mask(self, mask: Any, ids: torch.Tensor, name: str) -> torch.Tensor:
        if mask is None:
            return torch.ones(ids.shape, dtype=torch.bool, device=self.device)
        mask = _as_tensor(mask, name, "a 0/1 or bool tensor [B, T]").to(self.device)
        if tuple(mask.shape) != tuple(ids.shape):
            raise DecisionInputError(
                f"{name} shape {tuple(mask.shape)} differs from the ids {tuple(ids.shape)}", name
            )
        if mask.dtype != torch.bool:
            if ((mask != 0) & (mask != 1)).any():
                raise DecisionInputError(f"{name} must hold only 0/1 values", name)
            mask = mask != 0
        # right padding: once a row has a 0, it must stay 0 (no real token after padding)
        if mask.shape[1] > 1 and (mask[:, 1:] & ~mask[:, :-1]).any():
            raise DecisionInputError(
                f"{name} is not right-padded (a real token follows padding; left padding is not "
                "supported: put padding at the end of each row)",
                name,
            )
        return mask

    def _segments(self, seg: Any, ids: torch.Tensor, name: str) -> torch.Tensor | None:
        if seg is None:
            return None
        seg = _as_tensor(seg, name, "an integer tensor [B, T]").to(self.device)
        if tuple(seg.shape) != tuple(ids.shape) or seg.dtype.is_floating_point:
            raise DecisionInputError(
                f"{name} must be an integer tensor shaped like the ids {tuple(ids.shape)}", name
            )
        if seg.numel() and (int(seg.min()) < 0 or int(seg.max()) >= self.config.num_segments):
            raise DecisionInputError(
                f"{name} must lie in [0, {self.config.num_segments})", name
            )
        return seg.long()

    def _check_cache(self, cache: Any, batch: int) -> HistoryCache:
        if not isinstance(cache, HistoryCache):
            raise DecisionInputError("cache must be a HistoryCache from prefill/commit", "cache")
        if cache.batch_size != batch or len(cache.layers) != len(self.model.layers):
            raise DecisionInputError(
                f"cache holds {cache.batch_size} rows and {len(cache.layers)} layers; the block "
                f"has {batch} rows and the model {len(self.model.layers)} layers",
                "cache",
            )
        for i, (layer, got) in enumerate(zip(self.model.layers, cache.layers, strict=True)):
            problem = _cache_mismatch(got, layer.empty_cache(0, self.device, self.dtype))
            if problem:
                raise DecisionInputError(
                    f"cache layer {i} {problem}; build caches with this model's prefill/commit",
                    "cache",
                )
        return cache

    # ------------------------------------------------------------------ paths
    def empty_cache(self, batch_size: int) -> HistoryCache:
        """The cache of ``batch_size`` empty histories."""
        try:  # an int or anything usable as an index (numpy ints), not a bool or a float
            batch = operator.index(batch_size)
        except TypeError:
            batch = -1
        if isinstance(batch_size, bool) or batch < 0:
            raise DecisionInputError(
                f"batch_size must be a non-negative integer, got {batch_size!r}", "batch_size"
            )
        batch_size = batch
        layers = tuple(
            layer.empty_cache(batch_size, self.device, self.dtype) for layer in self.model.layers
        )
        return HistoryCache(torch.zeros(batch_size, dtype=torch.long, device=self.device), layers)

    def _history_pass(
        self, ids: torch.Tensor, mask: torch.Tensor, seg: torch.Tensor | None,
        cache: HistoryCache, need_hidden: bool = True,
    ) -> tuple[torch.Tensor | None, HistoryCache]:
        """Causal pass of new tokens after ``cache``: final hidden states (None unless
        ``need_hidden``) and the new cache."""
        h = self.model.embed(ids, seg)
        if ids.shape[1] == 0:  # nothing to fold in: the cache stays as it is
            return h, cache
        new_layers: list[LayerCache] = []
        last = len(self.model.layers) - 1
        for i, (layer, layer_cache) in enumerate(zip(self.model.layers, cache.layers,
                                                     strict=True)):
            h, new = layer.history(h, mask, cache.lengths, layer_cache,
                                   ffn=need_hidden or i < last)
            new_layers.append(new)
        lengths = cache.lengths + mask.sum(-1)
        new_cache = HistoryCache(lengths, tuple(new_layers))
        return (self.model.norm(h) if need_hidden else None), new_cache

    def _block_pass(
        self, ids: torch.Tensor, mask: torch.Tensor, seg: torch.Tensor | None, cache: HistoryCache
    ) -> torch.Tensor:
        """Bidirectional pass of a block after ``cache``: final hidden states [B, L, H]."""
        h = self.model.embed(ids, seg)
        if ids.shape[1] == 0:
            return h
        for layer, layer_cache in zip(self.model.layers, cache.layers, strict=True):
            h = layer.block(h, mask, cache.lengths, layer_cache)
        return self.model.norm(h)

    # ------------------------------------------------------------------ public API
    def history_logits(
        self, input_ids: Any, attention_mask: Any = None, segment_ids: Any = None
    ) -> torch.Tensor:
        """Causal next-token logits [B, T, V] (the Qwen3.5 forward, exact)."""
        ids = self._ids(input_ids, "input_ids")
        mask = self._mask(attention_mask, ids, "attention_mask")
        seg = self._segments(segment_ids, ids, "segment_ids")
        h, _ = self._history_pass(ids, mask, seg, self.empty_cache(ids.shape[0]))
        assert h is not None
        return self.lm_head(h)

    def prefill(
        self, input_ids: Any, attention_mask: Any = None, segment_ids: Any = None
    ) -> HistoryCache:
        """The history cache of right-padded histories (rows may differ in length)."""
        ids = self._ids(input_ids, "input_ids")
        mask = self._mask(attention_mask, ids, "attention_mask")
        seg = self._segments(segment_ids, ids, "segment_ids")
        _, cache = self._history_pass(ids, mask, seg, self.empty_cache(ids.shape[0]),
                                      need_hidden=False)
        return cache

    def commit(
        self, block_ids: Any, cache: HistoryCache, block_mask: Any = None, segment_ids: Any = None
    ) -> HistoryCache:
        """Fold a finished block into a new cache with the causal path (== prefilling it)."""
        ids = self._ids(block_ids, "block_ids")
        cache = self._check_cache(cache, ids.shape[0])
        mask = self._mask(block_mask, ids, "block_mask")
        seg = self._segments(segment_ids, ids, "segment_ids")
        _, new = self._history_pass(ids, mask, seg, cache, need_hidden=False)
        return new

    def denoise(
        self, block_ids: Any, cache: HistoryCache, block_mask: Any = None, segment_ids: Any = None
    ) -> torch.Tensor:
        """One bidirectional denoising forward: logits [B, L, V]. ``cache`` is not modified."""
        ids = self._ids(block_ids, "block_ids")
        cache = self._check_cache(cache, ids.shape[0])
        mask = self._mask(block_mask, ids, "block_mask")
        seg = self._segments(segment_ids, ids, "segment_ids")
        return self.lm_head(self._block_pass(ids, mask, seg, cache))

    def forward(
        self,
        history_ids: Any,
        block_ids: Any,
        history_mask: Any = None,
        block_mask: Any = None,
        history_segments: Any = None,
        block_segments: Any = None,
    ) -> torch.Tensor:
        """Differentiable training forward: prefill the history, then denoise the block."""
        cache = self.prefill(history_ids, history_mask, history_segments)
        return self.denoise(block_ids, cache, block_mask, block_segments)

    # ------------------------------------------------------------------ decoding (decision.joint)
    def decide(
        self,
        document: Any,
        questions: Any,
        mode: str = "joint",
        threshold: float = 0.9,
        max_steps: int | None = None,
        return_probabilities: bool = False,
        **engine_options: Any,
    ) -> Any:
        """Answer ``questions`` about ``document`` (``decision.joint.engine.decide``)."""
        from decision.joint.engine import decide

        return decide(self, document, questions, mode, threshold, max_steps,
                      return_probabilities, **engine_options)

    def decide_many(self, requests: Any, **engine_options: Any) -> list[Any]:
        """Answer several requests in one batch: ``decision.joint.engine.decide_many``."""
        from decision.joint.engine import decide_many

        return decide_many(self, requests, **engine_options)


__all__ = ["AttentionCache", "DecisionModel", "GDNCache", "HistoryCache"]


def _as_tensor(value: Any, name: str, what: str) -> torch.Tensor:
    """``value`` as a tensor, or a ``DecisionInputError`` naming ``name`` (a string, a ragged
    list or None would otherwise raise torch's own TypeError/ValueError)."""
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise DecisionInputError(f"{name} must be {what}: {exc}", name) from None


def _cache_mismatch(got: LayerCache, expected: LayerCache) -> str | None:
    """Why ``got`` cannot serve the layer whose empty cache is ``expected`` (None if it can):
    another mixer kind, head shape, dtype or device would otherwise fail deep inside a kernel."""
    if type(got) is not type(expected):
        return f"is a {type(got).__name__} where the model has a {type(expected).__name__}"
    for name in ("state", "conv_tail") if isinstance(got, GDNCache) else ("key", "value"):
        have, want = getattr(got, name), getattr(expected, name)
        if have.dtype != want.dtype or have.device != want.device:
            return (
                f"{name} is {have.dtype} on {have.device}; the model needs {want.dtype} "
                f"on {want.device}"
            )
        free = (0, 2) if isinstance(got, AttentionCache) else (0,)  # rows; attention: positions
        if have.dim() != want.dim() or any(
            a != b
            for d, (a, b) in enumerate(zip(have.shape, want.shape, strict=True))
            if d not in free
        ):
            return f"{name} has shape {tuple(have.shape)}, unlike the model's {tuple(want.shape)}"
    return None

