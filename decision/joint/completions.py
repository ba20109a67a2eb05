"""Slots with few valid fillings: list them once, then decode a step with a handful of gathers.

Most answer slots accept few token sequences: a boolean, a choice among a few options, a small
integer range (every tokenisation counted). For those, the most probable valid completion and
each token's marginal among valid completions (what ``decision.joint.dp`` computes by dynamic
programming) are exact over the list: with the slot's J fillings x_j and
w_j = sum_t logp[t, x_j[t]],

    best = argmax_j w_j,   P(x_t = v | valid) = sum_{j : x_j[t] = v} softmax(w)_j.

A fixed position is a one-hot row of ``logp``, so fillings that disagree with it get -inf, and
keep it for the rest of the decode: a slot's list narrows to the fillings still possible as its
tokens are fixed (``FillingTable.narrowed``; one fixed digit of an integer in [0, 5000] leaves
about a tenth). Per
step that is one gather, one sum and a few segment reductions for all such slots at once,
against a loop over positions for the programmes; the lists are built once per automaton and
width (cached). A slot whose list would exceed ``MAX_CELLS`` tokens (patterns, JSON, wide
ranges) keeps the programmes. Measured on one core: the 5,001 fillings of 4 tokens of an
integer in [0, 5000] add about 50 us to a step, the programmes take about 160 us for that slot
alone; a list's cost grows with its size, so near the limit the two are about even.

Ties break to the first filling in the list, which is ordered lexicographically by the
automaton's edge order (deterministic, independent of the other slots in the batch).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from decision.schemas.compile import TokenAutomaton, automaton_bytes

MAX_CELLS = 32_768  # fillings x width per slot; beyond it the dynamic programmes decode it
NARROW_ROWS = 512  # smaller tables are not narrowed: a step's fixed costs dominate there


class IdentityCache:
    """A thread-safe LRU cache keyed by the identity of objects (held, so that their ids are
    not reused) and bounded in bytes: lists of up to ``MAX_CELLS`` tokens are a quarter of a
    megabyte each, so a count bound alone could hold gigabytes in a long-running service."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[Any, tuple[tuple[Any, ...], Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, objects: tuple[Any, ...], extra: Any = None) -> Any:
        """The value stored for these objects (and ``extra``), or None."""
        key = (tuple(id(o) for o in objects), extra)
        with self._lock:
            hit = self._items.get(key)
            if hit is None or not all(a is b for a, b in zip(hit[0], objects, strict=True)):
                return None
            self._items.move_to_end(key)
            return hit[1]

    def put(self, objects: tuple[Any, ...], extra: Any, value: Any, nbytes: int) -> None:
        key = (tuple(id(o) for o in objects), extra)
        with self._lock:
            old = self._items.pop(key, None)
            self._bytes -= old[2] if old is not None else 0
            self._items[key] = (objects, value, nbytes)
            self._bytes += nbytes
            while self._bytes > self.max_bytes and len(self._items) > 1:
                _, (_, _, size) = self._items.popitem(last=False)
                self._bytes -= size


_cache = IdentityCache(max_bytes=64 << 20)


def _suffix_counts(automaton: TokenAutomaton, length: int, cap: int) -> np.ndarray:
    """``[length + 1, S]``: accepted suffixes of exactly ``length - t`` tokens from each state,
    capped at ``cap`` (only whether a count exceeds the limit matters)."""
    src, dst = automaton.src.numpy(), automaton.dst.numpy()
    counts = np.zeros((length + 1, automaton.num_states))
    counts[length] = automaton.accept.numpy()
    for t in range(length - 1, -1, -1):
        step = np.bincount(src, weights=counts[t + 1][dst], minlength=automaton.num_states)
        counts[t] = np.minimum(step, cap)
    return counts


def _enumerate(automaton: TokenAutomaton, length: int, limit: int) -> np.ndarray | None:
    """Every accepted sequence of exactly ``length`` tokens, ``[J, length]`` in lexicographic
    edge order, or None when there are more than ``limit``."""
    counts = _suffix_counts(automaton, length, limit + 1)
    if counts[0][0] > limit:  # state 0 is the initial state of a TokenAutomaton
        return None
    src, tok, dst = automaton.src.numpy(), automaton.tok.numpy(), automaton.dst.numpy()
    order = np.argsort(src, kind="stable")  # edges grouped by source, in edge order
    starts = np.searchsorted(src[order], np.arange(automaton.num_states + 1))
    prefixes = np.zeros((1 if counts[0][0] > 0 else 0, 0), dtype=np.int64)
    states = np.zeros(len(prefixes), dtype=np.int64)
    for t in range(length):
        degree = starts[states + 1] - starts[states]
        parent = np.repeat(np.arange(len(states)), degree)
        # the k-th outgoing edge of each parent: its offset in the grouped edge order
        first = np.repeat(starts[states], degree)
        rank = np.arange(len(parent)) - np.repeat(np.cumsum(degree) - degree, degree)
        edge = order[first + rank]
        alive = counts[t + 1][dst[edge]] > 0  # only edges from which acceptance is reachable
        parent, edge = parent[alive], edge[alive]
        prefixes = np.concatenate([prefixes[parent], tok[edge][:, None]], axis=1)
        states = dst[edge]
    return prefixes


def fillings(automaton: TokenAutomaton, length: int) -> np.ndarray | None:
    """The automaton's accepted sequences of ``length`` tokens (cached), or None when they
    would take more than ``MAX_CELLS`` tokens."""
    hit = _cache.get((automaton,), length)
    if hit is not None:
        return hit[0]
    table = _enumerate(automaton, length, MAX_CELLS // max(length, 1))
    # the entry holds the automaton too: counted, else once the compile cache dropped it, the
    # automaton of every schema seen (64 bytes each here without a table) stayed alive
    nbytes = 64 + automaton_bytes(automaton) + (table.nbytes if table is not None else 0)
    _cache.put((automaton,), length, (table,), nbytes)
    return table


@dataclass(frozen=True)
class FillingTable:
    """The fillings of K slots, concatenated: slot k owns rows ``starts[k]:starts[k + 1]`` of
    ``tokens`` (a slot without fillings owns one stand-in row with ``padding`` -inf). NumPy, ragged:
    a step is about fifteen operations on arrays of J x L entries in all, where padding every
    slot to the longest list, or torch's per-operation overhead, would dominate."""

    tokens: np.ndarray  # [J, L] int64
    by_position: np.ndarray  # [L, J] the same, transposed (fast sums over positions)
    starts: np.ndarray  # [K] first row of each slot
    sizes: np.ndarray  # [K] rows of each slot
    owner: np.ndarray  # [J] slot of each row
    padding: np.ndarray  # [J] 0 for a filling, -inf for an empty slot's stand-in row
    _flat: dict[int, np.ndarray] = field(default_factory=dict)  # vocab size -> [L, J]

    @staticmethod
    def build(tables: Sequence[np.ndarray]) -> FillingTable:
        length = tables[0].shape[1]
        rows = [t if len(t) else np.zeros((1, length), dtype=np.int64) for t in tables]
        sizes = np.array([len(t) for t in rows])
        tokens = np.concatenate(rows).astype(np.int64, copy=False)
        padding = np.concatenate(
            [np.full(len(r), 0.0 if len(t) else -np.inf, dtype=np.float32)
             for r, t in zip(rows, tables, strict=True)]
        )
        return FillingTable(
            tokens=tokens,
            by_position=np.ascontiguousarray(tokens.T),
            starts=np.concatenate([[0], np.cumsum(sizes)[:-1]]),
            sizes=sizes,
            owner=np.repeat(np.arange(len(rows)), sizes),
            padding=padding,
        )

    def _flat_index(self, vocab: int) -> np.ndarray:
        """Index of ``logp[k, t, tokens[j, t]]`` (k the owner of row j) in the flattened
        ``logp``, ``[L, J]``."""
        index = self._flat.get(vocab)
        if index is None:
            length = self.by_position.shape[0]
            base = (self.owner[None, :] * length + np.arange(length)[:, None]) * vocab
            index = self._flat[vocab] = base + self.by_position
        return index

    def weights(self, logp: np.ndarray) -> np.ndarray:
        """Each filling's log-weight ``[J]`` under ``logp`` ``[K, L, V]`` (-inf: impossible)."""
        flat = np.ascontiguousarray(logp, dtype=np.float32).reshape(-1)
        return flat.take(self._flat_index(logp.shape[-1])).sum(0) + self.padding

    def decode(
        self, logp: np.ndarray, weight: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Best filling ``[K, L]``, its log-weight ``[K]`` (-inf when none is possible: then the
        confidences are undefined) and each of its tokens' marginal among valid fillings
        ``[K, L]``, from ``logp`` ``[K, L, V]`` (or its ``weights`` when already computed)."""
        if weight is None:
            weight = self.weights(logp)
        score = np.maximum.reduceat(weight, self.starts)  # [K]
        # per-row copies of per-slot values by np.repeat (slots own contiguous rows): several
        # times faster than fancy indexing by ``owner`` on these arrays
        row_score = np.repeat(score, self.sizes)
        rows = np.arange(len(weight))
        first = np.where(weight == row_score, rows, len(rows))
        best = np.minimum.reduceat(first, self.starts)  # the first maximum of each slot
        tokens = self.tokens[best]  # [K, L]
        with np.errstate(invalid="ignore"):  # -inf - -inf in a slot without fillings
            share = np.exp(weight - row_score)
            agree = self.by_position == np.repeat(tokens.T, self.sizes, axis=1)  # [L, J]
            mass = np.add.reduceat(agree * share, self.starts, axis=1)  # [L, K]
            confidence = (mass / np.add.reduceat(share, self.starts)).T
        return tokens, score, confidence

    def narrowed(self, weight: np.ndarray) -> FillingTable | None:
        """The table without the fillings ``weight`` rules out (-inf), or None when it is small
        (``NARROW_ROWS``) or that would drop less than half of it or leave a slot empty.

        Exact for the rest of a decode: a filling gets -inf only from a fixed position's one-hot
        row (log-probabilities of finite logits are finite), and fixed tokens stay fixed. Rows
        keep their order, so ties still break to the first filling.
        """
        if len(weight) < NARROW_ROWS:
            return None
        keep = weight > -np.inf
        kept = np.flatnonzero(keep)
        if 2 * len(kept) > len(keep):
            return None
        sizes = np.add.reduceat(keep, self.starts)
        if not sizes.all():
            return None
        tokens = self.tokens.take(kept, axis=0)  # take by index: ~4x a boolean mask on axis 1
        return FillingTable(
            tokens=tokens,
            by_position=np.ascontiguousarray(tokens.T),
            starts=np.concatenate([[0], np.cumsum(sizes)[:-1]]),
            sizes=sizes,
            owner=self.owner.take(kept),
            padding=self.padding.take(kept),
            _flat={v: index.take(kept, axis=1) for v, index in self._flat.items()},
        )
