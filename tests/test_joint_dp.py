"""The vectorised dynamic programmes and the listed-fillings decoder equal brute-force
enumeration on small random automata."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from decision.joint import dp
from decision.joint.completions import MAX_CELLS, FillingTable, fillings
from decision.joint.constrain import ActiveSlots
from decision.joint.dp import (
    PackedAutomata,
    log_partition,
    log_space_marginals,
    search,
    token_marginals,
    viterbi,
)
from decision.schemas.compile import TokenAutomaton

VOCAB = 3


@st.composite
def automata(draw) -> TokenAutomaton:
    states = draw(st.integers(1, 4))
    src, tok, dst = [], [], []
    for s in range(states):
        for v in range(VOCAB):
            target = draw(st.integers(-1, states - 1))  # -1: no edge
            if target >= 0:
                src.append(s)
                tok.append(v)
                dst.append(target)
    accept = torch.tensor([draw(st.booleans()) for _ in range(states)])
    as_long = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    return TokenAutomaton(states, as_long(src), as_long(tok), as_long(dst), accept, budget=0)


def _accepts(a: TokenAutomaton, seq: tuple[int, ...]) -> bool:
    table = {(int(s), int(v)): int(d) for s, v, d in zip(a.src, a.tok, a.dst, strict=True)}
    state = 0
    for v in seq:
        if (state, v) not in table:
            return False
        state = table[(state, v)]
    return bool(a.accept[state])


@st.composite
def problems(draw):
    length = draw(st.integers(1, 4))
    count = draw(st.integers(1, 3))
    autos = [draw(automata()) for _ in range(count)]
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    logp = torch.log_softmax(torch.randn(count, length, VOCAB, generator=gen) * 2, dim=-1)
    # fix some positions: one-hot rows, as the decoder does for unmasked tokens
    for k in range(count):
        for t in range(length):
            if draw(st.booleans()) and draw(st.booleans()):
                v = draw(st.integers(0, VOCAB - 1))
                logp[k, t] = float("-inf")
                logp[k, t, v] = 0.0
    return autos, logp


@settings(max_examples=80, deadline=None)
@given(problems())
def test_dp_matches_brute_force(problem) -> None:
    autos, logp = problem
    packed = PackedAutomata.pack(autos)
    weights = packed.edge_weights(logp)
    log_z = log_partition(packed, weights)
    for dense in (True, False):
        tokens, score = viterbi(packed, weights, dense=dense)
        marg = token_marginals(packed, weights, tokens, dense=dense)
        _check(autos, logp, tokens, score, log_z, marg)
    tokens, score, marg = search(packed, logp)
    _check(autos, logp, tokens, score, log_z, marg)


@settings(max_examples=80, deadline=None)
@given(problems())
def test_trimmed_search_equals_the_edge_list_programmes(problem) -> None:
    """``search`` (only the edges on some valid path, position by position) returns the very
    tokens and scores of the edge-list Viterbi, and its marginals up to float rounding."""
    autos, logp = problem
    packed = PackedAutomata.pack(autos)
    weights = packed.edge_weights(logp)
    tokens, score = viterbi(packed, weights, dense=False)
    got_tokens, got_score, got_marg = search(packed, logp)
    valid = torch.isfinite(score)
    assert torch.equal(got_score, score)
    assert torch.equal(got_tokens[valid], tokens[valid])
    want = token_marginals(packed, weights, tokens, dense=False)
    assert torch.allclose(got_marg, want, atol=1e-6)


def _letters(n: int) -> TokenAutomaton:
    """Exactly ``n`` letters, tokens 0/1/2 one/two/three letters long, then token 3 ([EOS])
    padding: a fixed-length pattern as compile builds it (state i = i letters, n + 1 = DONE)."""
    src, tok, dst = [], [], []
    for i in range(n):
        for v in range(3):
            if i + v + 1 <= n:
                src.append(i), tok.append(v), dst.append(i + v + 1)
    src += [n, n + 1]
    tok += [3, 3]
    dst += [n + 1, n + 1]
    accept = torch.zeros(n + 2, dtype=torch.bool)
    accept[n:] = True
    as_long = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    return TokenAutomaton(n + 2, as_long(src), as_long(tok), as_long(dst), accept, budget=0)


@pytest.mark.parametrize("fixed_every", [0, 3])
def test_search_marginals_do_not_underflow_on_long_slots(fixed_every: int) -> None:
    """40 letters in 100 positions, [EOS] unlikely (logit -20) until the answer ends: beta's
    mass sits on states alpha cannot reach yet and the untrimmed passes' overlap underflows to
    marginals of 0; ``search`` keeps the log-space values (and the very Viterbi path)."""
    autos = [_letters(40), _letters(30)]
    packed = PackedAutomata.pack(autos)
    logits = torch.randn(2, 100, 8, generator=torch.Generator().manual_seed(3)) * 2
    logits[:, :, 3] -= 20
    logp = torch.log_softmax(logits, dim=-1)
    tokens, score = viterbi(packed, packed.edge_weights(logp), dense=False)
    for t in range(0, 100, fixed_every or 101):  # one-hot rows on the best path
        logp[:, t] = float("-inf")
        logp[torch.arange(2), t, tokens[:, t]] = 0.0
    weights = packed.edge_weights(logp)
    tokens, score = viterbi(packed, weights, dense=False)
    got_tokens, got_score, got_marg = search(packed, logp)
    assert torch.equal(got_tokens, tokens) and torch.equal(got_score, score)
    want = log_space_marginals(packed, logp, tokens)
    assert torch.allclose(got_marg.double(), want, atol=1e-5)
    if not fixed_every:  # what the untrimmed passes got wrong
        old = token_marginals(packed, weights, tokens, dense=False)
        assert (old.double() - want).abs().max() > 0.5


def test_active_slots_use_search_beyond_the_dense_tables(monkeypatch) -> None:
    """A slot past the dense limits is decoded by ``search`` in ``ActiveSlots``."""
    monkeypatch.setattr(dp, "DENSE_MAX_STATES", 0)
    autos = [_letters(5), _letters(4)]
    logp = torch.log_softmax(torch.randn(2, 7, 4, generator=torch.Generator().manual_seed(1)),
                             -1)
    active = ActiveSlots.build(torch.arange(2), torch.zeros(2, 7, dtype=torch.long), autos)
    active.listed, active.table = active.listed[:0], None  # force the programmes for both
    active.searched = np.arange(2)
    active.packed = PackedAutomata.pack(autos)
    tokens, conf = active.decode(logp)
    want_tokens, _, want_conf = search(active.packed, logp)
    assert tokens.tolist() == want_tokens.tolist()
    assert torch.allclose(conf, want_conf.clamp(0, 1))
    weights = active.packed.edge_weights(logp)
    dense_tokens, _ = viterbi(active.packed, weights, dense=True)
    assert tokens.tolist() == dense_tokens.tolist()
    assert torch.allclose(conf, token_marginals(active.packed, weights, dense_tokens, dense=True),
                          atol=1e-5)


def _check(autos, logp, tokens, score, log_z, marg) -> None:
    length = logp.shape[1]
    for k, a in enumerate(autos):
        valid = [
            (seq, sum(float(logp[k, t, v]) for t, v in enumerate(seq)))
            for seq in itertools.product(range(VOCAB), repeat=length)
            if _accepts(a, seq)
        ]
        valid = [(seq, w) for seq, w in valid if w > float("-inf")]
        if not valid:
            assert score[k] == float("-inf") and log_z[k] == float("-inf")
            continue
        best = max(w for _, w in valid)
        assert math.isclose(float(score[k]), best, rel_tol=1e-5, abs_tol=1e-5)
        seq = tuple(int(x) for x in tokens[k])
        assert _accepts(a, seq)
        assert math.isclose(sum(float(logp[k, t, v]) for t, v in enumerate(seq)), best,
                            rel_tol=1e-5, abs_tol=1e-5)
        z = sum(math.exp(w) for _, w in valid)
        assert math.isclose(float(log_z[k]), math.log(z), rel_tol=1e-4, abs_tol=1e-4)
        for t in range(length):
            p = sum(math.exp(w) for s, w in valid if s[t] == seq[t]) / z
            assert math.isclose(float(marg[k, t]), p, rel_tol=1e-4, abs_tol=1e-5)


@pytest.mark.parametrize("dense", [True, False])
def test_ties_break_deterministically(dense: bool) -> None:
    a = TokenAutomaton(
        2, torch.tensor([0, 0]), torch.tensor([0, 1]), torch.tensor([1, 1]),
        torch.tensor([False, True]), budget=1,
    )
    packed = PackedAutomata.pack([a])
    logp = torch.log(torch.full((1, 1, 2), 0.5))
    first, _ = viterbi(packed, packed.edge_weights(logp), dense=dense)
    second, _ = viterbi(packed, packed.edge_weights(logp), dense=dense)
    assert first.tolist() == second.tolist() == [[0]]


@settings(max_examples=80, deadline=None)
@given(problems())
def test_filling_lists_match_brute_force(problem) -> None:
    """The listed-fillings decoder computes the same best completion and marginals."""
    autos, logp = problem
    length = logp.shape[1]
    for a in autos:
        listed = fillings(a, length)
        expected = [s for s in itertools.product(range(VOCAB), repeat=length) if _accepts(a, s)]
        assert [tuple(row) for row in listed.tolist()] == expected  # lexicographic edge order
    if any(len(fillings(a, length)) == 0 for a in autos):
        return  # a slot without fillings: covered by the -inf check below
    packed = PackedAutomata.pack(autos)
    log_z = log_partition(packed, packed.edge_weights(logp))
    table = FillingTable.build([fillings(a, length) for a in autos])
    tokens, score, marg = (torch.from_numpy(x) for x in table.decode(logp.numpy()))
    _check(autos, logp, tokens, score, log_z, marg)


def test_filling_list_without_a_possible_filling_scores_minus_infinity() -> None:
    a = TokenAutomaton(1, torch.tensor([0]), torch.tensor([0]), torch.tensor([0]),
                       torch.tensor([True]), budget=1)
    none = TokenAutomaton(1, torch.tensor([0]), torch.tensor([1]), torch.tensor([0]),
                          torch.tensor([False]), budget=1)  # accepts nothing
    assert len(fillings(none, 2)) == 0
    logp = torch.log_softmax(torch.zeros(3, 2, VOCAB), -1)
    logp[0, 1] = float("-inf")
    logp[0, 1, 2] = 0.0  # fixed to a token the automaton has no edge for
    table = FillingTable.build([fillings(a, 2), fillings(none, 2), fillings(a, 2)])
    tokens, score, conf = table.decode(logp.numpy())
    assert score[0] == score[1] == float("-inf")
    assert tokens[2].tolist() == [0, 0] and conf[2].tolist() == [1.0, 1.0]


def test_too_many_fillings_left_to_the_programmes() -> None:
    """A slot over the list limit is decoded by the programmes, and both agree on the others."""
    free = TokenAutomaton(1, torch.tensor([0, 0, 0]), torch.tensor([0, 1, 2]),
                          torch.tensor([0, 0, 0]), torch.tensor([True]), budget=9)
    assert VOCAB**8 * 8 > MAX_CELLS and fillings(free, 8) is None
    assert len(fillings(free, 7)) == VOCAB**7 and VOCAB**7 * 7 <= MAX_CELLS
    one = TokenAutomaton(2, torch.tensor([0, 1]), torch.tensor([1, 0]), torch.tensor([1, 1]),
                         torch.tensor([False, True]), budget=8)
    logp = torch.log_softmax(torch.randn(2, 8, VOCAB, generator=torch.Generator().manual_seed(0)),
                             -1)
    active = ActiveSlots.build(torch.arange(2), torch.zeros(2, 8, dtype=torch.long), [free, one])
    assert active.listed.tolist() == [1] and active.searched.tolist() == [0]
    tokens, conf = active.decode(logp)
    packed = PackedAutomata.pack([free, one])
    weights = packed.edge_weights(logp)
    expected, _ = viterbi(packed, weights)
    assert tokens.tolist() == expected.tolist()
    assert torch.allclose(conf, token_marginals(packed, weights, expected), atol=1e-5)


def test_identity_cache_is_bounded_in_bytes_and_keyed_by_identity() -> None:
    from decision.joint.completions import IdentityCache

    cache = IdentityCache(max_bytes=100)
    a, b, c = object(), object(), object()
    cache.put((a,), 1, "a1", 40)
    cache.put((b,), 1, "b1", 40)
    assert cache.get((a,), 1) == "a1" and cache.get((a,), 2) is None  # extra is part of the key
    cache.put((c,), 1, "c1", 40)  # over budget: evicts the least recently used, b
    assert cache.get((b,), 1) is None and cache.get((a,), 1) == "a1" and cache.get((c,), 1) == "c1"
    cache.put((a,), 1, "a2", 40)  # replacing an entry does not count it twice
    assert cache.get((a,), 1) == "a2" and cache.get((c,), 1) == "c1"
    assert cache.get((object(),), 1) is None



def test_fillings_and_plans_caches_hold_at_most_their_bytes_of_automata(monkeypatch) -> None:
    """The caches hold the automata they are keyed by: a schema with too many fillings (no
    table) was counted 64 bytes (a plan 256), so once the compile cache dropped them, the
    automata of every distinct schema a service had seen stayed alive, without bound."""
    import gc
    import weakref

    from decision.joint import completions, constrain
    from decision.schemas.compile import automaton_bytes

    monkeypatch.setattr(completions, "_cache", completions.IdentityCache(max_bytes=1 << 20))
    monkeypatch.setattr(constrain, "_plans", completions.IdentityCache(max_bytes=1 << 20))
    edges, width, alive = 8000, 4, []
    for i in range(100):  # one state reading any of 8000 tokens: 8000^4 fillings, none listed
        automaton = TokenAutomaton(1, torch.zeros(edges, dtype=torch.long),
                                   torch.arange(edges) + i, torch.zeros(edges, dtype=torch.long),
                                   torch.tensor([True]), budget=width)
        assert fillings(automaton, width) is None
        ActiveSlots.build(torch.arange(1), torch.zeros(1, width, dtype=torch.long), [automaton])
        alive.append(weakref.ref(automaton))
        del automaton
    gc.collect()
    held = sum(1 for ref in alive if ref() is not None)
    size = edges * 3 * 8 + 1  # automaton_bytes of each
    assert automaton_bytes(TokenAutomaton(1, *([torch.zeros(edges, dtype=torch.long)] * 3),
                                          torch.tensor([True]), budget=width)) == size
    assert held <= 2 * (1 << 20) // size + 2, f"{held} of 100 automata still held"

@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_narrowed_table_decodes_as_the_full_one(seed: int) -> None:
    """Fixing a valid path's tokens one step at a time: the plan's table narrows (the big slot
    drops the fillings a fixed token rules out) and every step's answer equals a fresh table's."""
    gen = torch.Generator().manual_seed(seed)
    free = TokenAutomaton(1, torch.tensor([0, 0, 0]), torch.tensor([0, 1, 2]),
                          torch.tensor([0, 0, 0]), torch.tensor([True]), budget=7)
    ends = TokenAutomaton(2, torch.tensor([0, 0, 1]), torch.tensor([0, 1, 2]),
                          torch.tensor([0, 1, 1]), torch.tensor([False, True]), budget=7)
    autos, length = [free, ends], 7
    active = ActiveSlots.build(torch.arange(2), torch.zeros(2, length, dtype=torch.long), autos)
    full_rows = len(active.table.tokens)
    assert full_rows > 512  # big enough to be narrowed
    fixed: dict[tuple[int, int], int] = {}
    order = torch.randperm(2 * length, generator=gen).tolist()
    for step in range(2 * length):
        logp = torch.log_softmax(torch.randn(2, length, VOCAB, generator=gen) * 2, dim=-1)
        for (k, t), v in fixed.items():
            logp[k, t] = float("-inf")
            logp[k, t, v] = 0.0
        tokens, conf = active.decode(logp)
        fresh = FillingTable.build([fillings(a, length) for a in autos])
        want_tokens, _, want_conf = fresh.decode(logp.numpy())
        assert tokens.tolist() == want_tokens.tolist()
        assert torch.allclose(conf, torch.from_numpy(want_conf).float().clamp(0, 1), atol=1e-5)
        k, t = divmod(order[step], length)
        fixed[(k, t)] = int(tokens[k, t])  # fix a token of the best valid path
    assert len(active.table.tokens) < full_rows  # it did narrow
