"""Unmasking policies: given one denoising forward's logits, decide which slot tokens to fix.

The contract (as in SGLang's diffusion algorithms and dllm's sampler/scheduler split): a sampler
is a small object built from a config dataclass with one ``step(state, logits, force)`` method;
it mutates the ``BlockState`` and reports what it did. The loop that calls the model lives in
``decision.joint.engine``, so another policy plugs in by implementing ``step``.
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import torch

from decision.joint.constrain import ActiveSlots
from decision.joint.dp import PackedAutomata, log_partition
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
    _pack_slots: np.ndarray | None = None  # slot ids the current plan covers
    plan_seconds: float = 0.0  # time spent building plans (constraint work), cumulative
    _pack: ActiveSlots | None = None
    _slot_real: np.ndarray | None = None
    _slot_flat: np.ndarray | None = None

    def __post_init__(self) -> None:
        k = int(self.positions.shape[0])
        self.option_automata = self.option_automata or [None] * k
        self.option_probs = self.option_probs or [None] * k

    @property
    def wants_options(self) -> bool:
        """Whether any slot reports option probabilities (``return_probabilities``)."""
        return any(options is not None for options in self.option_automata)

    @property
    def remaining(self) -> torch.Tensor:
        """Masked tokens left per row, ``[B]``."""
        return self.masked.sum(-1)

    def slot_masked(self) -> np.ndarray:
        """``[K, Lmax]`` bool: which slot positions are still masked."""
        if self._slot_real is None:  # positions never change: their NumPy forms once
            self._slot_real = (self.positions >= 0).numpy()
            self._slot_flat = self.positions.clamp(min=0).numpy()
        return self._slot_real & self.masked.numpy().reshape(-1)[self._slot_flat]

    def active(self) -> ActiveSlots | None:
        """The slots with masked tokens (None when there are none) and how each is decoded.

        The plan covers every row's slots (a policy deciding only ``selectable`` rows ignores
        the others' results), so the samplers of a mixed batch share it. A plan of listed slots
        only is kept to the end of the decode: its table has narrowed to the fillings still
        possible (one row for a finished slot), which a rebuild would throw away. A plan with
        slots left to the programmes is rebuilt when at most a quarter of its slots are still
        live: finished slots are one-hot rows there, cheap to carry for a few steps only.
        """
        live = self.slot_masked().any(-1)
        if not live.any():
            return None
        if self._pack is not None:
            still = live[self._pack_slots]
            if still.sum() == live.sum() and (
                self._pack.packed is None or 4 * still.sum() > len(still)
            ):
                return self._pack
        start = time.perf_counter()
        key = np.flatnonzero(live)
        assert self._slot_real is not None  # set by slot_masked()
        width = int(self._slot_real[key].sum(-1).max())
        positions = self.positions.numpy()[key, :width]  # NumPy: a few us an op, not torch's
        automata = [self.slot_automata[i] for i in key.tolist()]
        self._pack_slots = key
        self._pack = ActiveSlots.build(
            torch.from_numpy(key), torch.from_numpy(positions), automata
        )
        self.plan_seconds += time.perf_counter() - start
        return self._pack

    def slot_logp(self, logits: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``[K, L, V]`` log-probabilities at ``positions`` (on the CPU); fixed and virtual ones
        one-hot (0 at their token, -inf elsewhere).

        Only the slot rows are gathered and normalised on the logits' device, never the block.
        """
        b, length, v = logits.shape
        pos = positions.clamp(min=0)
        index = pos.reshape(-1).to(logits.device)
        rows = logits.reshape(b * length, v).index_select(0, index).view(*pos.shape, v)
        logp = torch.log_softmax(rows.detach().float(), dim=-1).cpu()
        real, flat = (positions >= 0).numpy(), pos.numpy()
        fixed = ~real | ~self.masked.numpy().reshape(-1)[flat]
        if fixed.any():
            tokens = np.where(real, self.ids.numpy().reshape(-1)[flat], self.eos_id)
            k, t = np.nonzero(fixed)
            view = logp.numpy()
            view[k, t] = -np.inf
            view[k, t, tokens[k, t]] = 0.0
        return logp


@dataclass
class StepReport:
    """What one sampler step did."""

    fixed: torch.Tensor  # [B] tokens fixed per row
    seconds: float  # the whole step
    constraint_seconds: float = 0.0  # of which the constraint work (lists, programmes)


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
    ``commit``: what a token picked by that minimum brings with it: the rest of its slot's best
    valid completion (``"answer"``, the default: the answer it begins is decided whole, so a
    step decides at least one uncertain answer instead of one uncertain token, and the answers
    still come one at a time, the most confident first) or nothing more (``"token"``).
    """

    threshold: float = 0.9
    min_tokens: int = 1
    min_scope: Literal["row", "slot"] = "row"
    commit: Literal["token", "answer"] = "answer"

    def __post_init__(self) -> None:
        # refused here, not at the first step: ``min_tokens=0`` with nothing above the
        # threshold fixes nothing, and the decode loop would run forever; a NaN threshold or an
        # unknown ``min_scope``/``commit`` would silently decode under another policy
        check_threshold(self.threshold, "ThresholdSamplerConfig.threshold")
        if (isinstance(self.min_tokens, bool) or not isinstance(self.min_tokens, numbers.Integral)
                or self.min_tokens < 1):
            raise ValueError("ThresholdSamplerConfig.min_tokens must be an integer >= 1, got "
                             f"{self.min_tokens!r}")
        check_choice(self.min_scope, ("row", "slot"), "ThresholdSamplerConfig.min_scope")
        check_choice(self.commit, ("token", "answer"), "ThresholdSamplerConfig.commit")


def check_threshold(value: object, name: str) -> None:
    """``value`` is a real number in (0, 1] (a confidence threshold), or ValueError."""
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not math.isfinite(value) or not 0.0 < value <= 1.0):
        raise ValueError(f"{name} must be a number in (0, 1], got {value!r}")


def check_choice(value: object, allowed: tuple[str, ...], name: str) -> None:
    """``value`` is one of ``allowed``, or ValueError."""
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")


class ConstrainedThresholdSampler:
    """Most probable valid completion per slot by DP, then confidence-threshold unmasking.

    Per slot: the Viterbi path over the slot's automaton given the fixed tokens (DINGO), and the
    confidence of each of its tokens = its marginal probability among valid completions under
    the model's factorised distribution (forward-backward). Masked tokens with confidence
    strictly above the threshold are fixed (Fast-dLLM's parallel rule), and in every row with
    masked tokens at least ``min_tokens`` of the most confident ones, each with the rest of its
    answer (``commit="answer"``) or alone (``"token"``: then threshold 1.0 fixes one token a
    step). Fixing tokens of a valid path keeps a valid completion possible: every answer parses.
    """

    def __init__(self, config: ThresholdSamplerConfig | None = None) -> None:
        self.config = config or ThresholdSamplerConfig()

    def step(
        self, state: BlockState, logits: torch.Tensor, force: torch.Tensor | None = None
    ) -> StepReport:
        start, planned = time.perf_counter(), state.plan_seconds
        b, length = state.ids.shape
        active = state.active()  # which slots, each with its filling list or automaton
        if active is None:
            return StepReport(torch.zeros(b, dtype=torch.long), time.perf_counter() - start)
        constraint = state.plan_seconds - planned
        logp = state.slot_logp(logits, active.positions)
        begin = time.perf_counter()
        tokens, conf = active.decode(logp)
        constraint += time.perf_counter() - begin
        # selection in NumPy: a few dozen operations on [B, L] arrays, cheaper than torch's
        ids, all_masked = state.ids.numpy(), state.masked.numpy()
        grid_tok = ids.reshape(-1).copy()
        grid_conf = np.full(b * length, -1.0, dtype=np.float32)
        grid_tok[active.flat] = tokens.numpy()[active.real]
        grid_conf[active.flat] = conf.numpy()[active.real]
        grid_tok, grid_conf = grid_tok.reshape(b, length), grid_conf.reshape(b, length)
        masked = all_masked
        if state.selectable is not None:  # other rows belong to another policy this step
            masked = masked & state.selectable.numpy()[:, None]
        scores = np.where(masked, grid_conf, np.float32(-2.0))
        # the threshold as float64: NumPy casts a Python float to the array's float32, which
        # rounds 1 - 1e-9 to 1.0, and confidence 1 was then not "strictly above" it
        chosen = masked & (scores > np.float64(self.config.threshold))
        minimum = self.config.min_tokens
        if self.config.min_scope == "slot":
            extra = self._slot_minimum(scores, masked, chosen, active)
            if self.config.commit == "answer":
                extra |= self._whole_slots(extra, masked, active)
            chosen |= extra
        else:
            need = masked.any(-1) & (chosen.sum(-1) < minimum)
            if need.any():  # the most confident masked tokens (lowest column on ties)
                top = np.argsort(-scores, axis=1, kind="stable")[:, :minimum]
                extra = np.zeros_like(chosen)
                np.put_along_axis(extra, top, True, axis=1)
                extra &= masked & need[:, None]
                if self.config.commit == "answer":
                    extra |= self._whole_slots(extra, masked, active)
                chosen |= extra
        if force is not None:  # rows out of steps: fix the rest of their Viterbi paths
            chosen |= masked & force.numpy()[:, None]
        if state.wants_options:
            begin = time.perf_counter()
            self._option_probabilities(
                state, active.index, active.positions, logp, torch.from_numpy(chosen)
            )
            constraint += time.perf_counter() - begin
        state.ids = torch.from_numpy(np.where(chosen, grid_tok, ids))
        state.confidence = torch.from_numpy(
            np.where(chosen, grid_conf, state.confidence.numpy())
        )
        state.masked = torch.from_numpy(all_masked & ~chosen)
        fixed = torch.from_numpy(chosen.sum(-1))
        return StepReport(fixed, time.perf_counter() - start, constraint)

    @staticmethod
    def _whole_slots(picked: np.ndarray, masked: np.ndarray, active: ActiveSlots) -> np.ndarray:
        """Every masked position of the slots that own a ``picked`` position."""
        real, pos = active.real, active.clamped
        hit = (real & picked.reshape(-1)[pos]).any(-1)
        whole = np.zeros(masked.size, dtype=bool)
        whole[pos[real & hit[:, None]]] = True
        return whole.reshape(masked.shape) & masked

    def _slot_minimum(
        self, scores: np.ndarray, masked: np.ndarray, chosen: np.ndarray, active: ActiveSlots
    ) -> np.ndarray:
        """The ``min_tokens`` most confident masked tokens of every slot short of them."""
        real, pos = active.real, active.clamped
        slot_scores = np.where(real, scores.reshape(-1)[pos], np.float32(-2.0))
        slot_masked = real & masked.reshape(-1)[pos]
        slot_chosen = real & chosen.reshape(-1)[pos]
        need = slot_masked.any(-1) & (slot_chosen.sum(-1) < self.config.min_tokens)
        extra = np.zeros(masked.size, dtype=bool)
        if need.any():
            top = np.argsort(-slot_scores, axis=1, kind="stable")[:, : self.config.min_tokens]
            pick = np.zeros_like(real)
            np.put_along_axis(pick, top, True, axis=1)
            extra[pos[pick & slot_masked & need[:, None]]] = True
        return extra.reshape(masked.shape)

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
