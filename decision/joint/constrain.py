"""The constraint work of one step: each active slot's most probable valid completion and the
confidence of its tokens, from the slot-position log-probabilities.

Slots with few valid fillings are decoded from their lists (``decision.joint.completions``), the
others by the dynamic programmes (``decision.joint.dp``); both are exact, so which one a slot uses
changes the time a step takes, not its answer (up to ties and float rounding).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from decision.joint.completions import FillingTable, IdentityCache, fillings
from decision.joint.dp import PackedAutomata, search, token_marginals, viterbi
from decision.schemas.compile import TokenAutomaton, automaton_bytes

_Split = tuple[np.ndarray, FillingTable | None, np.ndarray, PackedAutomata | None]
_plans = IdentityCache(max_bytes=64 << 20)


def _split(automata: tuple[TokenAutomaton, ...], width: int) -> _Split:
    """Which slots are listed and which searched, with their table and packing (cached: the
    same questions give the same automata objects, so repeated requests skip the build)."""
    hit = _plans.get(automata, width)
    if hit is not None:
        return hit
    lists = [fillings(a, width) for a in automata]
    listed = [k for k, table in enumerate(lists) if table is not None]
    searched = [k for k, table in enumerate(lists) if table is None]
    table = FillingTable.build([lists[k] for k in listed]) if listed else None
    split = (
        np.array(listed, dtype=np.int64),
        table,
        np.array(searched, dtype=np.int64),
        PackedAutomata.pack([automata[k] for k in searched]) if searched else None,
    )
    # the table's arrays, and its gather index (added at the first decode), dominate; the
    # automata it holds count too, and for the searched ones their packing and its source index
    # (added at the first decode): some 4x their edges' bytes
    held = sum(automaton_bytes(a) for a in automata)
    held += sum(4 * automaton_bytes(automata[k]) for k in searched)
    _plans.put(automata, width, split, 256 + held + (3 * table.tokens.nbytes if table else 0))
    return split


@dataclass
class ActiveSlots:
    """The slots a step decodes: ``index`` ``[Ka]`` (slot ids in the ``BlockState``) and their
    ``positions`` ``[Ka, La]``, split into listed slots and slots left to the programmes.

    One decode's plan: its filling table narrows, step by step, to the fillings that agree with
    the tokens fixed so far (the cached table it starts from is never changed).
    """

    index: torch.Tensor
    positions: torch.Tensor
    listed: np.ndarray  # [Kl] rows of ``positions`` decoded from filling lists
    table: FillingTable | None
    searched: np.ndarray  # [Kd] rows decoded by the dynamic programmes
    packed: PackedAutomata | None
    real: np.ndarray  # [Ka, La] bool: positions inside the slot's budget
    clamped: np.ndarray  # [Ka, La] flat block index of each position (0 for virtual ones)
    flat: np.ndarray  # flat block indices of the real positions, row-major

    @staticmethod
    def build(
        index: torch.Tensor, positions: torch.Tensor, automata: Sequence[TokenAutomaton]
    ) -> ActiveSlots:
        listed, table, searched, packed = _split(tuple(automata), int(positions.shape[1]))
        grid = positions.numpy()
        real = grid >= 0
        return ActiveSlots(
            index=index,
            positions=positions,
            listed=listed,
            table=table,
            searched=searched,
            packed=packed,
            real=real,
            clamped=np.maximum(grid, 0),
            flat=grid[real],
        )

    def decode(self, logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Best valid completion ``[Ka, La]`` and each token's marginal probability among valid
        completions ``[Ka, La]`` (in [0, 1]), from ``logp`` ``[Ka, La, V]`` on the CPU.

        Raises RuntimeError when a slot has no valid completion (an automaton/budget mismatch).
        """
        if self.packed is None and self.table is not None:  # the common case: all listed
            tokens, score, confidence = self._decode_listed(logp.numpy())
        else:
            tokens = np.zeros(self.positions.shape, dtype=np.int64)
            confidence = np.zeros(self.positions.shape, dtype=np.float32)
            score = np.zeros(len(tokens), dtype=np.float32)
            if self.table is not None:
                rows = self.listed
                tokens[rows], score[rows], confidence[rows] = self._decode_listed(
                    logp.numpy()[rows]
                )
            assert self.packed is not None
            rows = self.searched
            slot_logp = logp[torch.from_numpy(rows)]
            if self.packed.dense(int(logp.shape[1])):
                weights = self.packed.edge_weights(slot_logp)
                best, found = viterbi(self.packed, weights)
                marginals = token_marginals(self.packed, weights, best)
            else:  # edge lists: only the edges on some valid path, position by position
                best, found, marginals = search(self.packed, slot_logp)
            tokens[rows], score[rows] = best.numpy(), found.numpy()
            confidence[rows] = marginals.numpy()
        if not np.isfinite(score).all():
            raise RuntimeError("a slot has no valid completion (automaton/budget mismatch)")
        confidence = np.clip(confidence, 0.0, 1.0).astype(np.float32, copy=False)
        return torch.from_numpy(tokens), torch.from_numpy(confidence)

    def _decode_listed(self, logp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The listed slots' decode; then their table drops the fillings it ruled out."""
        assert self.table is not None
        weight = self.table.weights(logp)
        result = self.table.decode(logp, weight)
        narrower = self.table.narrowed(weight)
        if narrower is not None:
            self.table = narrower
        return result
