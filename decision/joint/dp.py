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
    same_owner: torch.Tensor | None  # [N, N] float64, 1 where two states share an automaton
    size: int  # N

    def dense(self, length: int) -> bool:
        """Whether the dense [L, N, N] tables fit (few tensor ops a position instead of many)."""
        return self.same_owner is not None and length * self.size * self.size <= DENSE_MAX_CELLS

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
        same = None
        if offset <= DENSE_MAX_STATES:
            same = (owner[:, None] == owner[None, :]).double()
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
            same_owner=same,
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
    """Viterbi with a dense max-plus table per position: T_t[s, s'] = max over tokens."""
    n, (e, length) = packed.num_states, weights.shape
    w = weights.T.contiguous()  # [L, E]
    index = packed.cell.expand(length, e)
    table = torch.full((length, n * n), NEG_INF, dtype=w.dtype, device=w.device)
    table = table.scatter_reduce(1, index, w, "amax")
    # the token behind each cell's maximum: lowest edge index among the maximal edges
    hit = (w == table.gather(1, index)) & torch.isfinite(w)
    edges = torch.arange(e, device=w.device).expand(length, e)
    best = torch.full((length, n * n), e, dtype=torch.long, device=w.device)
    best = best.scatter_reduce(1, index, torch.where(hit, edges, e), "amin")
    table = table.view(length, n, n)
    alpha = _start(packed, w.dtype, NEG_INF)
    back = []
    for t in range(length):
        alpha, arg = (alpha[:, None] + table[t]).max(0)  # first maximum on ties
        back.append(arg)
    state, score, valid = _best_final(packed, alpha)
    # backtrack over the K automata in plain Python (a few scalars a position), then one gather
    pointers = torch.stack(back).tolist()
    path = [state.tolist()]
    for t in range(length - 1, 0, -1):
        path.append([pointers[t][s] for s in path[-1]])
    path.reverse()  # path[t][k] = state after position t
    after = torch.tensor(path, dtype=torch.long, device=w.device)  # [L, K]
    before = torch.cat([packed.initial[None, :], after[:-1]])
    cells = before * n + after
    edge = best.gather(1, cells)  # [L, K]
    edge = torch.where(valid[None, :] & (edge < e), edge, torch.zeros_like(edge))
    return packed.tok[edge].T.contiguous(), score


def _dense_sum_table(packed: PackedAutomata, probs: torch.Tensor) -> torch.Tensor:
    """``[L, N, N]``: M_t[s, s'] = sum of p_t(v) over the tokens v leading from s to s'."""
    n, length = packed.num_states, probs.shape[1]
    table = torch.zeros((length, n * n), dtype=probs.dtype, device=probs.device)
    return table.index_add_(1, packed.cell, probs.T).view(length, n, n)


def _rescale(x: torch.Tensor, same_owner: torch.Tensor) -> torch.Tensor:
    """Divide each automaton's states by their sum (one matmul with the block-ones matrix)."""
    return x / (x @ same_owner).clamp_min(1e-300)  # an empty automaton stays 0


def _forward_dense(packed: PackedAutomata, table: torch.Tensor) -> torch.Tensor:
    """Scaled forward pass as vector-matrix products with the dense tables ``[L, N, N]``."""
    assert packed.same_owner is not None
    alpha = _start(packed, table.dtype, 0.0)
    out = [alpha]
    length = table.shape[0]
    for t in range(length):
        alpha = alpha @ table[t]
        if t % RESCALE_EVERY == RESCALE_EVERY - 1 or t == length - 1:
            alpha = _rescale(alpha, packed.same_owner)
        out.append(alpha)
    return torch.stack(out)


def _backward_dense(packed: PackedAutomata, table: torch.Tensor) -> torch.Tensor:
    """Scaled backward pass as matrix-vector products with the dense tables."""
    assert packed.same_owner is not None
    beta = packed.accept.to(table.dtype)
    out = [beta]
    for t in range(table.shape[0] - 1, -1, -1):
        beta = table[t] @ beta
        if t % RESCALE_EVERY == 0:
            beta = _rescale(beta, packed.same_owner)
        out.append(beta)
    return torch.stack(out[::-1])


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
    probs = torch.exp(weights.double())
    if packed.dense(probs.shape[1]) if dense is None else dense:
        table = _dense_sum_table(packed, probs)
        alpha, beta = _forward_dense(packed, table), _backward_dense(packed, table)
    else:
        alpha, beta = _forward_sparse(packed, probs)[0], _backward_sparse(packed, probs)
    edge = alpha[:-1, packed.src].T * probs * beta[1:, packed.dst].T  # [E, L]
    chosen = packed.tok[:, None] == tokens[packed.edge_owner]  # [E, L]
    shape = (packed.num_automata, probs.shape[1])
    total = torch.zeros(shape, dtype=probs.dtype, device=probs.device)
    total = total.index_add(0, packed.edge_owner, edge)
    mine = torch.zeros_like(total).index_add(0, packed.edge_owner, edge * chosen)
    return (mine / total).nan_to_num(0.0).float()
