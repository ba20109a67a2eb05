"""Unmasking policies: given one denoising forward's logits, decide which slot tokens to fix.

The contract (as in SGLang's diffusion algorithms and dllm's sampler/scheduler split): a sampler
is a small object built from a config dataclass with one ``step(state, logits, force)`` method;
it mutates the ``BlockState`` and reports what it did. The loop that calls the model lives in
``decision.joint.engine``, so another policy plugs in by implementing ``step``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal, Protocol

import torch

from decision.joint.dp import PackedAutomata, log_partition, token_marginals, viterbi
from decision.schemas.compile import TokenAutomaton


@dataclass
class BlockState:
    """The block being denoised for a batch of rows, and its answer slots.

    Slot k lives in batch row ``slot_row[k]``; ``positions[k, t]`` is the flat index
    ``row * L + column`` of its t-th token, or -1 past the slot's budget (a virtual position
    fixed to ``[EOS]``, so slots of different budgets share one ``[K, Lmax]`` grid).
    """

    ids: torch.Tensor  # [B, L] current block tokens
    masked: torch.Tensor  # [B, L] bool, True where still [MASK]
    confidence: torch.Tensor  # [B, L] confidence of each token when it was fixed
    positions: torch.Tensor  # [K, Lmax] flat indices, -1 = virtual
    slot_automata: list[TokenAutomaton]
    eos_id: int
    option_automata: list[list[TokenAutomaton] | None] = field(default_factory=list)
    option_probs: list[torch.Tensor | None] = field(default_factory=list)  # per slot
    selectable: torch.Tensor | None = None  # [B] bool, rows this step may fix (None: all)
    _pack_key: tuple[int, ...] = ()
    _pack: tuple[torch.Tensor, PackedAutomata, torch.Tensor] | None = None

    def __post_init__(self) -> None:
        k = int(self.positions.shape[0])
        self.option_automata = self.option_automata or [None] * k
        self.option_probs = self.option_probs or [None] * k

    @property
    def remaining(self) -> torch.Tensor:
        """Masked tokens left per row, ``[B]``."""
        return self.masked.sum(-1)

    def slot_masked(self) -> torch.Tensor:
        """``[K, Lmax]`` bool: which slot positions are still masked."""
        real = self.positions >= 0
        return real & self.masked.reshape(-1)[self.positions.clamp(min=0)]

    def active(self) -> tuple[torch.Tensor, PackedAutomata | None, torch.Tensor]:
        """Slots with masked tokens: their indices, packed automata and ``[Ka, La]`` positions.

        Finished slots (and slots of rows not ``selectable``) drop out of the dynamic programmes;
        the packing is rebuilt only when the set of active slots changes.
        """
        live = self.slot_masked().any(-1)
        if self.selectable is not None:  # only the slots of rows this policy decides
            live &= self.selectable[self.positions[:, 0] // self.ids.shape[1]]
        index = live.nonzero().flatten()
        key = tuple(index.tolist())
        if not key:
            return index, None, self.positions[:0]  # type: ignore[return-value]
        # keep the current packing while it covers the live slots and at most half of it is
        # finished (finished slots are all one-hot rows: harmless, and repacking costs more)
        if self._pack is not None and set(key) <= set(self._pack_key):
            if 2 * len(key) > len(self._pack_key):
                return self._pack
        if self._pack is None or key != self._pack_key:
            positions = self.positions[index]
            width = int((positions >= 0).sum(-1).max()) if len(key) else 0
            packed = PackedAutomata.pack([self.slot_automata[i] for i in key])
            self._pack_key, self._pack = key, (index, packed, positions[:, :width])
        return self._pack

    def slot_logp(self, logits: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``[K, L, V]`` log-probabilities at ``positions``; fixed and virtual ones one-hot.

        Computed on the logits' device: only the slot rows are gathered, never the whole block.
        """
        device = logits.device
        b, length, v = logits.shape
        real = positions >= 0
        pos = positions.clamp(min=0)
        tokens = torch.where(real, self.ids.reshape(-1)[pos], torch.full_like(pos, self.eos_id))
        fixed = (~real | ~self.masked.reshape(-1)[pos]).to(device)
        logp = torch.log_softmax(logits.reshape(b * length, v)[pos.to(device)].float(), dim=-1)
        one_hot = torch.full_like(logp, float("-inf"))
        one_hot.scatter_(-1, tokens.to(device)[..., None], 0.0)
        return torch.where(fixed[..., None], one_hot, logp)


@dataclass
class StepReport:
    """What one sampler step did."""

    fixed: torch.Tensor  # [B] tokens fixed per row
    seconds: float  # time spent in the constraint work (masks, dynamic programmes)


class Sampler(Protocol):
    """An unmasking policy (see module docstring)."""

    def step(
        self, state: BlockState, logits: torch.Tensor, force: torch.Tensor | None = None
    ) -> StepReport:
        """Fix masked tokens from ``logits`` [B, L, V]; every masked token of rows in ``force``."""
        ...


@dataclass(frozen=True)
class ThresholdSamplerConfig:
    """``threshold``: fix tokens whose confidence is above it.

    At least ``min_tokens`` are fixed each step in every row (``min_scope="row"``: one pass of
    one request) or in every slot (``"slot"``: each answer progresses every step, as a batch of
    standalone rows would; slots' automata are independent, so validity is kept).
    """

    threshold: float = 0.9
    min_tokens: int = 1
    min_scope: Literal["row", "slot"] = "row"


class ConstrainedThresholdSampler:
    """Most probable valid completion per slot by DP, then confidence-threshold unmasking.

    Per slot: the Viterbi path over the slot's automaton given the fixed tokens (DINGO), and the
    confidence of each of its tokens = its marginal probability among valid completions under
    the model's factorised distribution (forward-backward). Masked tokens with confidence
    strictly above the threshold are fixed (Fast-dLLM's parallel rule), and in every row with
    masked tokens at least ``min_tokens`` of the most confident ones, so threshold 1.0 fixes one
    token a step. Fixing tokens of a valid path keeps a valid completion possible: every answer
    parses.
    """

    def __init__(self, config: ThresholdSamplerConfig | None = None) -> None:
        self.config = config or ThresholdSamplerConfig()

    def step(
        self, state: BlockState, logits: torch.Tensor, force: torch.Tensor | None = None
    ) -> StepReport:
        start = time.perf_counter()
        index, packed, positions = state.active()
        b, length = state.ids.shape
        if packed is None:
            return StepReport(torch.zeros(b, dtype=torch.long), time.perf_counter() - start)
        logp = state.slot_logp(logits, positions)
        weights = packed.edge_weights(logp)
        tokens, score = viterbi(packed, weights)
        if not bool(torch.isfinite(score).all()):
            raise RuntimeError("a slot has no valid completion (automaton/budget mismatch)")
        conf = token_marginals(packed, weights, tokens).clamp(0.0, 1.0)
        real = positions >= 0
        flat_pos = positions[real]
        grid_tok = state.ids.reshape(-1).clone()
        grid_conf = torch.full((b * length,), -1.0)
        grid_tok[flat_pos] = tokens[real]
        grid_conf[flat_pos] = conf[real]
        grid_tok, grid_conf = grid_tok.view(b, length), grid_conf.view(b, length)
        masked = state.masked
        if state.selectable is not None:  # other rows belong to another policy this step
            masked = masked & state.selectable[:, None]
        scores = torch.where(masked, grid_conf, torch.full_like(grid_conf, -2.0))
        chosen = masked & (scores > self.config.threshold)
        if self.config.min_scope == "slot":
            chosen |= self._slot_minimum(scores, masked, chosen, positions)
        else:
            need = (masked.sum(-1) > 0) & (chosen.sum(-1) < self.config.min_tokens)
            if bool(need.any()):
                top = scores.topk(min(self.config.min_tokens, length), dim=-1).indices
                extra = torch.zeros_like(chosen).scatter_(1, top, True) & masked
                chosen |= extra & need[:, None]
        if force is not None:  # rows out of steps: fix the rest of their Viterbi paths
            chosen |= masked & force[:, None]
        self._option_probabilities(state, index, positions, logp, chosen)
        state.ids = torch.where(chosen, grid_tok, state.ids)
        state.confidence = torch.where(chosen, grid_conf, state.confidence)
        state.masked = state.masked & ~chosen
        return StepReport(chosen.sum(-1), time.perf_counter() - start)

    def _slot_minimum(
        self,
        scores: torch.Tensor,
        masked: torch.Tensor,
        chosen: torch.Tensor,
        positions: torch.Tensor,
    ) -> torch.Tensor:
        """The ``min_tokens`` most confident masked tokens of every slot short of them."""
        real = positions >= 0
        pos = positions.clamp(min=0)
        floor = torch.full(pos.shape, -2.0, dtype=scores.dtype)
        slot_scores = torch.where(real, scores.reshape(-1)[pos], floor)
        slot_masked = real & masked.reshape(-1)[pos]
        slot_chosen = real & chosen.reshape(-1)[pos]
        need = slot_masked.any(-1) & (slot_chosen.sum(-1) < self.config.min_tokens)
        top = slot_scores.topk(min(self.config.min_tokens, pos.shape[1]), dim=-1).indices
        pick = torch.zeros_like(real).scatter_(1, top, True) & slot_masked & need[:, None]
        extra = torch.zeros(masked.numel(), dtype=torch.bool)
        extra[pos[pick]] = True
        return extra.view_as(masked)

    @staticmethod
    def _option_probabilities(
        state: BlockState,
        index: torch.Tensor,
        positions: torch.Tensor,
        logp: torch.Tensor,
        chosen: torch.Tensor,
    ) -> None:
        """At a slot's first fix: P(option) = Z_option / sum of Z over the slot's options.

        Z_option sums the factorised model's probability over every tokenisation of the option
        (padded with [EOS]) given the same logits: the model's belief over the closed set.
        """
        automata: list[TokenAutomaton] = []
        rows: list[int] = []
        owners: list[int] = []
        real = positions >= 0
        for local, k in enumerate(index.tolist()):
            options = state.option_automata[k]
            if options is None or state.option_probs[k] is not None:
                continue
            pos = positions[local][real[local]]
            untouched = bool(state.masked.reshape(-1)[pos].all())
            if untouched and bool(chosen.reshape(-1)[pos].any()):
                automata += options
                rows += [local] * len(options)
                owners += [k] * len(options)
        if not automata:
            return
        packed = PackedAutomata.pack(automata, rows)
        log_z = log_partition(packed, packed.edge_weights(logp))
        owner = torch.tensor(owners)
        for k in sorted(set(owners)):
            state.option_probs[k] = torch.softmax(log_z[owner == k].float(), dim=0)
