"""Constrained dynamic programmes over token automata, vectorised across every slot of a batch.

Each slot k has a token automaton A_k and L positions with log-probabilities ``logp[k, t, v]``
(a fixed position has 0 at its token and -inf elsewhere). Its valid fillings are the token
sequences of length L that A_k accepts. With w(x) = sum_t logp[k, t, x_t]:

* ``viterbi``: argmax_x w(x) over valid x, the most probable valid completion (DINGO,
  arXiv 2505.23061, Alg. 1, for any unmasking order since fixed positions are just one-hot rows);
* ``forward``/``backward``: the log-partition sums alpha_t(s) = logsumexp over prefixes reaching s,
  beta_t(s) = logsumexp over suffixes from s to acceptance (the forward-backward algorithm on the
  product of the automaton and the factorised model), so that
  P(x_t = v | valid) = sum_{edges e=(s,v,s')} exp(alpha_t(s) + logp[t,v] + beta_{t+1}(s') - log Z).

All automata are packed into one flat edge list with global state ids, so one step of a
programme is a few tensor ops over all edges of all slots at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from decision.schemas.compile import TokenAutomaton

NEG_INF = float("-inf")


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

    @property
    def num_states(self) -> int:
        return int(self.accept.shape[0])

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
        return PackedAutomata(
            src=cat([a.src + o for a, o in zip(automata, offsets, strict=True)]),
            tok=cat([a.tok for a in automata]),
            dst=cat([a.dst + o for a, o in zip(automata, offsets, strict=True)]),
            edge_row=torch.repeat_interleave(torch.tensor(rows), sizes).to(device),
            edge_owner=torch.repeat_interleave(torch.arange(len(automata)), sizes).to(device),
            initial=torch.tensor(offsets, dtype=torch.long, device=device),
            accept=cat([a.accept for a in automata]),
            state_owner=torch.repeat_interleave(
                torch.arange(len(automata)), torch.tensor([a.num_states for a in automata])
            ).to(device),
            num_automata=len(automata),
        )

    def edge_weights(self, logp: torch.Tensor) -> torch.Tensor:
        """``[E, L]`` log-weight of each edge at each position (``logp`` is ``[rows, L, V]``)."""
        return logp[self.edge_row, :, self.tok]


def _scatter_logsumexp(values: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """logsumexp of ``values`` grouped by ``index`` (dim 0) into ``size`` groups; -inf if empty."""
    shape = (size, *values.shape[1:])
    peak = torch.full(shape, NEG_INF, dtype=values.dtype, device=values.device)
    peak = peak.scatter_reduce(0, index, values, "amax", include_self=True)
    safe = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    total = torch.zeros(shape, dtype=values.dtype, device=values.device)
    total = total.scatter_add(0, index, torch.exp(values - safe.gather(0, index)))
    return torch.log(total) + safe


def _start(packed: PackedAutomata, dtype: torch.dtype) -> torch.Tensor:
    alpha = torch.full((packed.num_states,), NEG_INF, dtype=dtype, device=packed.accept.device)
    alpha[packed.initial] = 0.0
    return alpha


def forward(packed: PackedAutomata, weights: torch.Tensor) -> torch.Tensor:
    """alpha ``[L + 1, N]``: log-sum of all prefixes of length t ending in each state."""
    alpha = _start(packed, weights.dtype)
    out = [alpha]
    n = packed.num_states
    for t in range(weights.shape[1]):
        alpha = _scatter_logsumexp(alpha[packed.src] + weights[:, t], packed.dst, n)
        out.append(alpha)
    return torch.stack(out)


def backward(packed: PackedAutomata, weights: torch.Tensor) -> torch.Tensor:
    """beta ``[L + 1, N]``: log-sum of all accepted suffixes from each state at position t."""
    n = packed.num_states
    zero = torch.zeros(n, dtype=weights.dtype, device=weights.device)
    beta = torch.where(packed.accept, zero, torch.full_like(zero, NEG_INF))
    out = [beta]
    for t in range(weights.shape[1] - 1, -1, -1):
        beta = _scatter_logsumexp(beta[packed.dst] + weights[:, t], packed.src, n)
        out.append(beta)
    return torch.stack(out[::-1])


def log_partition(packed: PackedAutomata, weights: torch.Tensor) -> torch.Tensor:
    """log Z ``[K]`` per automaton: log-sum over all accepted sequences of length L."""
    alpha = forward(packed, weights)[-1]
    final = torch.where(packed.accept, alpha, torch.full_like(alpha, NEG_INF))
    return _scatter_logsumexp(final, packed.state_owner, packed.num_automata)


def viterbi(packed: PackedAutomata, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Best valid sequence per automaton: tokens ``[K, L]`` and its log-weight ``[K]``.

    Backpointers keep, per position and destination state, the lowest-index edge achieving the
    maximum, so ties break deterministically. An automaton with no valid sequence gets -inf.
    """
    n, length = packed.num_states, weights.shape[1]
    edges = torch.arange(packed.src.shape[0], device=weights.device)
    alpha = _start(packed, weights.dtype)
    pointers = []
    for t in range(length):
        cand = alpha[packed.src] + weights[:, t]
        best = torch.full_like(alpha, NEG_INF).scatter_reduce(0, packed.dst, cand, "amax")
        hit = (cand == best[packed.dst]) & torch.isfinite(cand)
        pick = torch.full((n,), edges.shape[0], dtype=torch.long, device=weights.device)
        pick = pick.scatter_reduce(0, packed.dst[hit], edges[hit], "amin")
        pointers.append(pick)
        alpha = best
    final = torch.where(packed.accept, alpha, torch.full_like(alpha, NEG_INF))
    k = packed.num_automata
    score = torch.full((k,), NEG_INF, dtype=weights.dtype, device=weights.device)
    score = score.scatter_reduce(0, packed.state_owner, final, "amax")
    states = torch.arange(n, device=weights.device)
    at_best = (final == score[packed.state_owner]) & torch.isfinite(final)
    state = torch.full((k,), n, dtype=torch.long, device=weights.device)
    state = state.scatter_reduce(0, packed.state_owner[at_best], states[at_best], "amin")
    valid = torch.isfinite(score)
    state = torch.where(valid, state, packed.initial)
    tokens = torch.zeros((k, length), dtype=torch.long, device=weights.device)
    sentinel = edges.shape[0]
    for t in range(length - 1, -1, -1):
        edge = pointers[t][state]
        edge = torch.where(valid & (edge < sentinel), edge, torch.zeros_like(edge))
        tokens[:, t] = packed.tok[edge]
        state = packed.src[edge]
    return tokens, score


def token_marginals(
    packed: PackedAutomata, weights: torch.Tensor, tokens: torch.Tensor
) -> torch.Tensor:
    """P(x_t = tokens[k, t] | valid) per automaton and position, ``[K, L]`` (forward-backward)."""
    alpha = forward(packed, weights)  # [L+1, N]
    beta = backward(packed, weights)
    final = torch.where(packed.accept, alpha[-1], torch.full_like(alpha[-1], NEG_INF))
    log_z = _scatter_logsumexp(final, packed.state_owner, packed.num_automata)  # [K]
    # score of each edge used at each position: alpha_t(src) + w_t(e) + beta_{t+1}(dst)
    edge_score = alpha[:-1, packed.src].T + weights + beta[1:, packed.dst].T  # [E, L]
    chosen = packed.tok[:, None] == tokens[packed.edge_owner]  # [E, L]
    edge_score = torch.where(chosen, edge_score, torch.full_like(edge_score, NEG_INF))
    owner = packed.edge_owner[:, None].expand_as(edge_score)
    log_m = _scatter_logsumexp(edge_score, owner, packed.num_automata)  # [K, L]
    return torch.exp(log_m - log_z[:, None]).nan_to_num(0.0)
