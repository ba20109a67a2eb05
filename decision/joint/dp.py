"""Constrained dynamic programmes over token automata, vectorised across every slot of a batch.

Each slot k has a token automaton A_k and L positions with log-probabilities ``logp[k, t, v]``
(a fixed position has 0 at its token and -inf elsewhere). Its valid fillings are the token
sequences of length L that A_k accepts. With w(x) = sum_t logp[k, t, x_t]:

* ``viterbi``: argmax_x w(x) over valid x, the most probable valid completion (DINGO,
  arXiv 2505.23061, Alg. 1, for any unmasking order since fixed positions are just one-hot rows);
* ``forward``/``backward``: the partition sums alpha_t(s) = sum over prefixes reaching s,
  beta_t(s) = sum over suffixes from s to acceptance (the forward-backward algorithm on the
  product of the automaton and the factorised model), so that
  P(x_t = v | valid) = sum_{edges e=(s,v,s')} alpha_t(s) p_t(v) beta_{t+1}(s') / Z, computed in
  float64 with per-position rescaling (Rabiner's scaled forward-backward).

All automata are packed into one flat edge list with global state ids, so one step of a
programme is a few tensor ops over all edges of all slots at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from decision.schemas.compile import TokenAutomaton

NEG_INF = float("-inf")
DENSE_MAX_STATES = 1024
DENSE_MAX_CELLS = 2_000_000
# dense passes rescale every few positions: float64 cannot underflow in 4 positions unless the
# valid tokens' mass at each is below 1e-75, far beyond any softmax of finite logits in practice
RESCALE_EVERY = 4


@dataclass(frozen=True)
class PackedAutomata:
    """Several automata in one edge list; automaton j reads row ``rows[j]`` of ``logp``."""

    src: torch.Tensor  # [E] global source state
    tok: torch.Tensor  # [E] token id
    dst: torch.Tensor  # [E] global destination state
    edge_row: torch.Tensor  # [E] logp row of the edge's automaton
    edge_owner: torch.Tensor  # [E] automaton index
    initial: torch.Tensor  # [K] global initial state of each automaton
    accept: torch.Tensor  # [N] bool
    state_owner: torch.Tensor  # [N] automaton index
    num_automata: int
    cell: torch.Tensor  # [E] src * N + dst: the edge's cell in a dense [N, N] table
    size: int  # N

    @cached_property
    def np(self) -> dict[str, np.ndarray]:
        """NumPy views of the index arrays (the dense programmes run in NumPy on the CPU)."""
        names = ("src", "tok", "dst", "edge_owner", "initial", "accept", "state_owner", "cell")
        return {name: getattr(self, name).cpu().numpy() for name in names}

    def dense(self, length: int) -> bool:
        """Whether the dense [L, N, N] tables fit (few tensor ops a position instead of many)."""
        return self.size <= DENSE_MAX_STATES and length * self.size * self.size <= DENSE_MAX_CELLS

    @property
    def num_states(self) -> int:
        return self.size

    @staticmethod
    def pack(
        automata: Sequence[TokenAutomaton], rows: Sequence[int] | None = None, device: str = "cpu"
    ) -> PackedAutomata:
        rows = list(range(len(automata))) if rows is None else list(rows)
        offsets, offset = [], 0
        for automaton in automata:
            offsets.append(offset)
            offset += automaton.num_states
        cat = lambda xs: torch.cat(xs).to(device)  # noqa: E731
        sizes = torch.tensor([a.num_edges for a in automata])
        src = cat([a.src + o for a, o in zip(automata, offsets, strict=True)])
        dst = cat([a.dst + o for a, o in zip(automata, offsets, strict=True)])
        owner = torch.repeat_interleave(
            torch.arange(len(automata)), torch.tensor([a.num_states for a in automata])
        ).to(device)
        return PackedAutomata(
            src=src,
            tok=cat([a.tok for a in automata]),
            dst=dst,
            edge_row=torch.repeat_interleave(torch.tensor(rows), sizes).to(device),
            edge_owner=torch.repeat_interleave(torch.arange(len(automata)), sizes).to(device),
            initial=torch.tensor(offsets, dtype=torch.long, device=device),
            accept=cat([a.accept for a in automata]),
            state_owner=owner,
            num_automata=len(automata),
            cell=src * offset + dst,
            size=offset,
        )

    def edge_weights(self, logp: torch.Tensor) -> torch.Tensor:
        """``[E, L]`` log-weight of each edge at each position (``logp`` is ``[rows, L, V]``).

        Gathered on ``logp``'s device, returned on the automata's: only E x L numbers move.
        """
        device = logp.device
        return logp[self.edge_row.to(device), :, self.tok.to(device)].to(self.src.device)


def _start(packed: PackedAutomata, dtype: torch.dtype, fill: float) -> torch.Tensor:
    alpha = torch.full((packed.num_states,), fill, dtype=dtype, device=packed.accept.device)
    alpha[packed.initial] = 1.0 if fill == 0.0 else 0.0
    return alpha


def _normalise(x: torch.Tensor, packed: PackedAutomata) -> tuple[torch.Tensor, torch.Tensor]:
    """Divide each automaton's states by their sum (kept in range); return the sums ``[K]``."""
    total = torch.zeros(packed.num_automata, dtype=x.dtype, device=x.device)
    total = total.index_add(0, packed.state_owner, x)
    safe = torch.where(total > 0, total, torch.ones_like(total))
    return x / safe[packed.state_owner], total


def _forward_sparse(
    packed: PackedAutomata, probs: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled forward pass in linear space (float64, rescaled per automaton each position).

    Returns alpha ``[L + 1, N]`` (each automaton's states sum to 1 at every t, or 0 when no
    prefix survives) and ``log Z`` ``[K]`` = log-sum over all accepted length-L sequences.
    """
    alpha = _start(packed, probs.dtype, 0.0)
    log_scale = torch.zeros(packed.num_automata, dtype=probs.dtype, device=probs.device)
    out = [alpha]
    n = packed.num_states
    for t in range(probs.shape[1]):
        nxt = torch.zeros(n, dtype=probs.dtype, device=probs.device)
        nxt = nxt.index_add(0, packed.dst, alpha[packed.src] * probs[:, t])
        alpha, total = _normalise(nxt, packed)
        log_scale += torch.log(total)
        out.append(alpha)
    final = torch.zeros(packed.num_automata, dtype=probs.dtype, device=probs.device)
    final = final.index_add(0, packed.state_owner, alpha * packed.accept)
    return torch.stack(out), log_scale + torch.log(final)


def _backward_sparse(packed: PackedAutomata, probs: torch.Tensor) -> torch.Tensor:
    """Scaled backward pass: beta ``[L + 1, N]`` proportional, per automaton and position, to
    the probability mass of accepted suffixes from each state."""
    beta = packed.accept.to(probs.dtype)
    out = [beta]
    n = packed.num_states
    for t in range(probs.shape[1] - 1, -1, -1):
        prev = torch.zeros(n, dtype=probs.dtype, device=probs.device)
        prev = prev.index_add(0, packed.src, beta[packed.dst] * probs[:, t])
        beta, _ = _normalise(prev, packed)
        out.append(beta)
    return torch.stack(out[::-1])


def log_partition(packed: PackedAutomata, weights: torch.Tensor) -> torch.Tensor:
    """log Z ``[K]`` per automaton from log-weights ``[E, L]``: log-sum over accepted sequences."""
    return _forward_sparse(packed, torch.exp(weights.double()))[1]


def _viterbi_sparse(
    packed: PackedAutomata, weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Edge-list Viterbi; backpointers keep the lowest-index maximal edge per state."""
    n, length = packed.num_states, weights.shape[1]
    edges = torch.arange(packed.src.shape[0], device=weights.device)
    alpha = _start(packed, weights.dtype, NEG_INF)
    pointers = []
    for t in range(length):
        cand = alpha[packed.src] + weights[:, t]
        best = torch.full_like(alpha, NEG_INF).scatter_reduce(0, packed.dst, cand, "amax")
        hit = (cand == best[packed.dst]) & torch.isfinite(cand)
        pick = torch.full((n,), edges.shape[0], dtype=torch.long, device=weights.device)
        pick = pick.scatter_reduce(0, packed.dst[hit], edges[hit], "amin")
        pointers.append(pick)
        alpha = best
    state, score, valid = _best_final(packed, alpha)
    tokens = torch.zeros((packed.num_automata, length), dtype=torch.long, device=weights.device)
    sentinel = edges.shape[0]
    for t in range(length - 1, -1, -1):
        edge = pointers[t][state]
        edge = torch.where(valid & (edge < sentinel), edge, torch.zeros_like(edge))
        tokens[:, t] = packed.tok[edge]
        state = packed.src[edge]
    return tokens, score


def _best_final(
    packed: PackedAutomata, alpha: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per automaton: best accepting state (lowest id on ties), its score, whether finite."""
    n, k = packed.num_states, packed.num_automata
    final = torch.where(packed.accept, alpha, torch.full_like(alpha, NEG_INF))
    score = torch.full((k,), NEG_INF, dtype=alpha.dtype, device=alpha.device)
    score = score.scatter_reduce(0, packed.state_owner, final, "amax")
    states = torch.arange(n, device=alpha.device)
    at_best = (final == score[packed.state_owner]) & torch.isfinite(final)
    state = torch.full((k,), n, dtype=torch.long, device=alpha.device)
    state = state.scatter_reduce(0, packed.state_owner[at_best], states[at_best], "amin")
    valid = torch.isfinite(score)
    return torch.where(valid, state, packed.initial), score, valid


def _viterbi_dense(
    packed: PackedAutomata, weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Viterbi with a dense max-plus table per position, T_t[s, s'] = max over tokens, in NumPy
    (a handful of small array ops a position; torch's per-op overhead dominated here)."""
    ix = packed.np
    n, (e, length) = packed.num_states, weights.shape
    w = weights.detach().cpu().numpy().T  # [L, E]
    rows = np.repeat(np.arange(length), e)
    cells = np.tile(ix["cell"], length)
    flat = w.reshape(-1)
    table = np.full((length, n * n), -np.inf, dtype=w.dtype)
    np.maximum.at(table, (rows, cells), flat)
    # the token behind each cell's maximum: lowest edge index among the maximal edges
    hit = (flat == table[rows, cells]) & np.isfinite(flat)
    best = np.full((length, n * n), e, dtype=np.int64)
    np.minimum.at(best, (rows[hit], cells[hit]), np.tile(np.arange(e), length)[hit])
    table = table.reshape(length, n, n)
    alpha = np.full(n, -np.inf, dtype=w.dtype)
    alpha[ix["initial"]] = 0.0
    back = np.empty((length, n), dtype=np.int64)
    columns = np.arange(n)
    for t in range(length):
        cand = alpha[:, None] + table[t]
        back[t] = cand.argmax(0)  # first maximum on ties
        alpha = cand[back[t], columns]
    final = np.where(ix["accept"], alpha, -np.inf)
    k = packed.num_automata
    bounds = [*ix["initial"].tolist(), n]
    state = np.empty(k, dtype=np.int64)
    score = np.empty(k, dtype=w.dtype)
    for j in range(k):  # best accepting state of each automaton (lowest id on ties)
        part = final[bounds[j] : bounds[j + 1]]
        state[j] = bounds[j] + int(part.argmax())
        score[j] = part.max()
    valid = np.isfinite(score)
    state = np.where(valid, state, ix["initial"])
    after = np.empty((length, k), dtype=np.int64)
    after[-1] = state
    for t in range(length - 1, 0, -1):
        after[t - 1] = back[t][after[t]]
    before = np.concatenate([ix["initial"][None, :], after[:-1]])
    edge = best[np.arange(length)[:, None], before * n + after]  # [L, K]
    edge = np.where(valid[None, :] & (edge < e), edge, 0)
    tokens = torch.from_numpy(np.ascontiguousarray(ix["tok"][edge].T))
    return tokens, torch.from_numpy(score)


def _dense_sum_table(packed: PackedAutomata, probs: np.ndarray) -> np.ndarray:
    """``[L, N, N]``: M_t[s, s'] = sum of p_t(v) over the tokens v leading from s to s'."""
    n, length = packed.num_states, probs.shape[0]
    index = (np.arange(length)[:, None] * (n * n) + packed.np["cell"][None, :]).reshape(-1)
    table = np.bincount(index, weights=probs.reshape(-1), minlength=length * n * n)
    return table.reshape(length, n, n)


def _rescale(x: np.ndarray, packed: PackedAutomata) -> np.ndarray:
    """Divide each automaton's states by their sum."""
    ix = packed.np
    total = np.add.reduceat(x, ix["initial"])[ix["state_owner"]]
    return x / np.maximum(total, 1e-300)  # an empty automaton stays 0


def _forward_dense(packed: PackedAutomata, table: np.ndarray) -> np.ndarray:
    """Scaled forward pass as vector-matrix products with the dense tables ``[L, N, N]``."""
    length, n = table.shape[0], packed.num_states
    out = np.empty((length + 1, n))
    alpha = np.zeros(n)
    alpha[packed.np["initial"]] = 1.0
    out[0] = alpha
    for t in range(length):
        alpha = alpha @ table[t]
        if t % RESCALE_EVERY == RESCALE_EVERY - 1 or t == length - 1:
            alpha = _rescale(alpha, packed)
        out[t + 1] = alpha
    return out


def _backward_dense(packed: PackedAutomata, table: np.ndarray) -> np.ndarray:
    """Scaled backward pass as matrix-vector products with the dense tables."""
    length, n = table.shape[0], packed.num_states
    out = np.empty((length + 1, n))
    beta = packed.np["accept"].astype(np.float64)
    out[length] = beta
    for t in range(length - 1, -1, -1):
        beta = table[t] @ beta
        if t % RESCALE_EVERY == 0:
            beta = _rescale(beta, packed)
        out[t] = beta
    return out


def _marginals_dense(
    packed: PackedAutomata, weights: torch.Tensor, tokens: torch.Tensor
) -> torch.Tensor:
    ix = packed.np
    probs = np.exp(weights.detach().cpu().numpy().astype(np.float64).T)  # [L, E]
    table = _dense_sum_table(packed, probs)
    alpha, beta = _forward_dense(packed, table), _backward_dense(packed, table)
    edge = alpha[:-1][:, ix["src"]] * probs * beta[1:][:, ix["dst"]]  # [L, E]
    chosen = ix["tok"][None, :] == tokens.numpy().T[:, ix["edge_owner"]]  # [L, E]
    length, k = probs.shape[0], packed.num_automata
    index = (np.arange(length)[:, None] * k + ix["edge_owner"][None, :]).reshape(-1)
    total = np.bincount(index, weights=edge.reshape(-1), minlength=length * k)
    mine = np.bincount(index, weights=(edge * chosen).reshape(-1), minlength=length * k)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.nan_to_num(mine / total, nan=0.0).reshape(length, k).T
    return torch.from_numpy(np.ascontiguousarray(out)).float()


def viterbi(
    packed: PackedAutomata, weights: torch.Tensor, dense: bool | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Best valid sequence per automaton: tokens ``[K, L]`` and its log-weight ``[K]``.

    Ties break deterministically (lowest edge / state index). An automaton without a valid
    sequence gets -inf. ``dense``: force the dense (True) or edge-list (False) implementation.
    """
    if packed.src.shape[0] == 0:  # no edges: nothing is accepted (beyond the empty string)
        k, length = packed.num_automata, weights.shape[1]
        score = torch.full((k,), NEG_INF if length else 0.0, device=weights.device)
        return torch.zeros((k, length), dtype=torch.long, device=weights.device), score
    use_dense = packed.dense(weights.shape[1]) if dense is None else dense
    return (_viterbi_dense if use_dense else _viterbi_sparse)(packed, weights)


def token_marginals(
    packed: PackedAutomata, weights: torch.Tensor, tokens: torch.Tensor, dense: bool | None = None
) -> torch.Tensor:
    """P(x_t = tokens[k, t] | valid) per automaton and position, ``[K, L]`` (forward-backward).

    With the scaled passes, alpha_t(src) p_t(e) beta_{t+1}(dst) over the edges of one automaton at
    one position is proportional to the edge marginals with a factor that cancels in the ratio.
    """
    if packed.dense(weights.shape[1]) if dense is None else dense:
        return _marginals_dense(packed, weights, tokens)
    probs = torch.exp(weights.double())
    alpha, beta = _forward_sparse(packed, probs)[0], _backward_sparse(packed, probs)
    edge = alpha[:-1, packed.src].T * probs * beta[1:, packed.dst].T  # [E, L]
    chosen = packed.tok[:, None] == tokens[packed.edge_owner]  # [E, L]
    shape = (packed.num_automata, probs.shape[1])
    total = torch.zeros(shape, dtype=probs.dtype, device=probs.device)
    total = total.index_add(0, packed.edge_owner, edge)
    mine = torch.zeros_like(total).index_add(0, packed.edge_owner, edge * chosen)
    return (mine / total).nan_to_num(0.0).float()


@dataclass(frozen=True)
class _SourceIndex:
    """The packed edges grouped by source state (CSR), in NumPy, built once per packing.

    Edge ``i`` of this order is packed edge ``edge[i]``; the edges leaving state ``s`` are
    ``start[s]:start[s + 1]`` (in packed order, so ties still break by packed edge index).
    """

    edge: np.ndarray  # [E] packed edge id
    start: np.ndarray  # [N + 1]
    src: np.ndarray
    dst: np.ndarray
    owner: np.ndarray  # automaton of the edge
    cell: np.ndarray  # row * V + tok: the edge's entry in one position's flat [R, V] table
    tok: np.ndarray

    @staticmethod
    def build(packed: PackedAutomata, vocab: int) -> _SourceIndex:
        ix = packed.np
        edge = np.argsort(ix["src"], kind="stable")
        start = np.zeros(packed.num_states + 1, dtype=np.int64)
        np.cumsum(np.bincount(ix["src"], minlength=packed.num_states), out=start[1:])
        row = packed.edge_row.cpu().numpy()[edge]
        return _SourceIndex(
            edge=edge,
            start=start,
            src=ix["src"][edge],
            dst=ix["dst"][edge],
            owner=ix["edge_owner"][edge],
            cell=row * vocab + ix["tok"][edge],
            tok=ix["tok"][edge],
        )

    def leaving(self, states: np.ndarray) -> np.ndarray:
        """Positions (in this order) of the edges leaving ``states``: contiguous runs."""
        lo = self.start[states]
        count = self.start[states + 1] - lo
        total = int(count.sum())
        if total == 0:
            return np.zeros(0, dtype=np.int64)
        shift = np.repeat(lo - (np.cumsum(count) - count), count)
        return shift + np.arange(total, dtype=np.int64)


def _source_index(packed: PackedAutomata, vocab: int) -> _SourceIndex:
    """``packed``'s source index for a vocabulary of ``vocab`` (cached on the packing, which
    ``constrain`` keeps across steps and requests)."""
    cache = packed.__dict__.setdefault("_source_index", {})
    if vocab not in cache:
        cache[vocab] = _SourceIndex.build(packed, vocab)
    return cache[vocab]


def search(
    packed: PackedAutomata, logp: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Viterbi path, its log-weight and its tokens' marginals over the trimmed lattice only.

    ``logp`` is ``[R, L, V]`` on the CPU (automaton j reads the row of its edges). Returns what
    ``viterbi`` and then ``token_marginals`` of the edge-list form return (tokens ``[K, L]``,
    score ``[K]``, marginals ``[K, L]``), in three sweeps that touch, at each position, only
    the edges that matter:

    1. forward, Viterbi (float32, as ``viterbi``: the same tokens and score, ties to the lowest
       packed edge index) over the edges leaving a state reached with a finite score and
       carrying a token of finite log-probability: at a fixed position (a one-hot row) one
       edge per reached state, and a fixed-length pattern reaches few states early on;
    2. backward, the scaled backward pass over those edges, which drops the edges whose
       destination cannot reach acceptance in the positions left;
    3. forward, the scaled forward pass over the edges left, with each position's marginals.

    So alpha and beta are both spread over the states on some valid path (forward- and
    co-reachable), and their overlap does not underflow as it does in ``token_marginals`` when
    one pass's mass sits on states the other cannot reach (a 200-letter pattern in 256 positions:
    marginals of 0 from position 74 on). Edge weights are gathered per position from the
    ``[R, V]`` table, never as an ``[E, L]`` array; the source index is built once per packing.
    """
    k, n = packed.num_automata, packed.num_states
    rows, length, vocab = logp.shape
    if packed.src.shape[0] == 0:  # no edges: as ``viterbi``
        tokens, score = viterbi(packed, torch.zeros((0, length)))
        return tokens, score.float(), torch.zeros((k, length))
    ix = packed.np
    index = _source_index(packed, vocab)
    lp = logp.detach().cpu().numpy().astype(np.float32, copy=False)
    lp = np.ascontiguousarray(lp.transpose(1, 0, 2)).reshape(length, rows * vocab)
    finite = np.isfinite(lp).all(axis=1)  # [L]: positions where no edge has to be dropped
    owner, initial, big = ix["state_owner"], ix["initial"], index.edge.shape[0]
    # 1. Viterbi, keeping each position's edges
    score32 = np.full(n, -np.inf, dtype=np.float32)
    score32[initial] = 0.0
    reached = initial.copy()  # states with a finite score, ascending
    kept: list[np.ndarray] = []  # per position: the edges (in the source order) still in play
    weights: list[np.ndarray] = []  # their log-weights; the backward pass keeps probabilities
    picks: list[tuple[np.ndarray, np.ndarray]] = []  # reached states, their best packed edge
    for t in range(length):
        pos = index.leaving(reached)
        w = lp[t][index.cell[pos]]
        if not finite[t]:
            ok = np.isfinite(w)
            pos, w = pos[ok], w[ok]
        d = index.dst[pos]
        cand = score32[index.src[pos]] + w
        best = np.full(n, -np.inf, dtype=np.float32)
        np.maximum.at(best, d, cand)
        hit = cand == best[d]
        pick = np.full(n, big, dtype=np.int64)
        np.minimum.at(pick, d[hit], index.edge[pos[hit]])
        reached = np.flatnonzero(best > -np.inf)
        picks.append((reached, pick[reached]))
        score32 = best
        kept.append(pos)
        weights.append(w)
    # the best accepting state of each automaton (lowest id on ties), then the path back
    final = np.where(ix["accept"], score32, np.float32(-np.inf))
    score = np.full(k, -np.inf, dtype=np.float32)
    np.maximum.at(score, owner, final)
    at_best = (final == score[owner]) & np.isfinite(final)
    state = np.full(k, n, dtype=np.int64)
    np.minimum.at(state, owner[at_best], np.flatnonzero(at_best))
    valid = np.isfinite(score)
    state = np.where(valid, state, initial)
    tokens = np.zeros((k, length), dtype=np.int64)
    for t in range(length - 1, -1, -1):
        there, best_edge = picks[t]
        edge = np.zeros(k, dtype=np.int64)  # an automaton without a valid path: edge 0
        if len(there):
            where = np.minimum(np.searchsorted(there, state), len(there) - 1)
            edge = np.where(valid & (there[where] == state), best_edge[where], 0)
        tokens[:, t] = ix["tok"][edge]
        state = ix["src"][edge]
    del picks
    # 2. scaled backward pass (each automaton's beta sums to 1 at every position, or is 0)
    beta = np.zeros((length + 1, n))
    beta[length] = ix["accept"]
    for t in range(length - 1, -1, -1):
        pos, prob = kept[t], np.exp(weights[t].astype(np.float64))
        suffix = prob * beta[t + 1][index.dst[pos]]
        live = suffix > 0
        pos, suffix = pos[live], suffix[live]
        kept[t], weights[t] = pos, prob[live]
        prev = np.bincount(index.src[pos], weights=suffix, minlength=n)
        scale = np.bincount(owner, weights=prev, minlength=k)
        beta[t] = prev / np.where(scale > 0, scale, 1.0)[owner]
    # 3. scaled forward pass over the trimmed edges, and the chosen tokens' share of the mass
    marginals = np.zeros((k, length))
    alpha = np.zeros(n)
    alpha[initial] = 1.0
    for t in range(length):
        pos = kept[t]
        d = index.dst[pos]
        step = alpha[index.src[pos]] * weights[t]
        nxt = np.bincount(d, weights=step, minlength=n)
        # all paths' mass through position t, per automaton: sum over edges of step * beta
        total = np.bincount(owner, weights=nxt * beta[t + 1], minlength=k)
        edge_owner = index.owner[pos]
        chosen = index.tok[pos] == tokens[edge_owner, t]  # edges carrying the chosen token
        mass = step[chosen] * beta[t + 1][d[chosen]]
        mine = np.bincount(edge_owner[chosen], weights=mass, minlength=k)
        marginals[:, t] = mine / np.where(total > 0, total, 1.0)
        scale = np.bincount(owner, weights=nxt, minlength=k)
        alpha = nxt / np.where(scale > 0, scale, 1.0)[owner]
    return (
        torch.from_numpy(tokens),
        torch.from_numpy(score),
        torch.from_numpy(marginals).float(),
    )


def log_space_marginals(
    packed: PackedAutomata, logp: torch.Tensor, tokens: torch.Tensor
) -> torch.Tensor:
    """P(x_t = tokens[k, t] | valid) ``[K, L]`` by forward-backward in log space (float64, no
    rescaling that could underflow): the slow reference the fast passes are tested against."""
    w, ninf = packed.edge_weights(logp).double(), NEG_INF
    n, k, length = packed.num_states, packed.num_automata, logp.shape[1]

    def logsumexp(index: torch.Tensor, x: torch.Tensor, size: int) -> torch.Tensor:
        top = torch.full((size,), ninf, dtype=x.dtype).scatter_reduce(0, index, x, "amax")
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        total = torch.zeros(size, dtype=x.dtype).index_add(0, index, torch.exp(x - top[index]))
        return torch.log(total) + top

    la = torch.full((length + 1, n), ninf, dtype=torch.float64)
    la[0, packed.initial] = 0.0
    for t in range(length):
        la[t + 1] = logsumexp(packed.dst, la[t][packed.src] + w[:, t], n)
    lb = torch.full((length + 1, n), ninf, dtype=torch.float64)
    lb[length] = torch.where(packed.accept, 0.0, ninf)
    for t in range(length - 1, -1, -1):
        lb[t] = logsumexp(packed.src, lb[t + 1][packed.dst] + w[:, t], n)
    out = torch.zeros(k, length, dtype=torch.float64)
    for t in range(length):
        edge = la[t][packed.src] + w[:, t] + lb[t + 1][packed.dst]
        chosen = packed.tok == tokens[packed.edge_owner, t]
        mine = logsumexp(packed.edge_owner[chosen], edge[chosen], k)
        out[:, t] = torch.exp(mine - logsumexp(packed.edge_owner, edge, k))
    return out.nan_to_num(0.0)  # an automaton with no valid filling: 0, not nan
