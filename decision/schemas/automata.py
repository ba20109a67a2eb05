"""Token automata (``TokenAutomaton``) and their construction from edges, a character DFA, a
literal or outlines-core's transitions; the size limits; the shortest accepted answer.

A ``TokenAutomaton`` is the edge list of a DFA over token ids, ready for the vectorised dynamic
programme of ``decision.joint.dp``: state 0 is initial; from every accepting state of the answer
language, ``[EOS]`` leads to an extra absorbing state DONE which only loops on ``[EOS]``, so a slot
is the answer followed by ``[EOS]`` padding and nothing may follow the padding. Its own module:
the decoder reads automata without compiling any (``decision.joint``), and every way of building
one ends in the same ``[EOS]`` completion (``_with_done``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from decision.errors import SchemaError
from decision.schemas.context import TokenizerContext

MAX_STATES = 50_000
MAX_EDGES = 2_000_000


@dataclass(frozen=True)
class TokenAutomaton:
    """A token DFA as tensors: edges ``src -tok-> dst``, accepting states, slot budget."""

    num_states: int
    src: torch.Tensor  # [E] int64
    tok: torch.Tensor  # [E] int64
    dst: torch.Tensor  # [E] int64
    accept: torch.Tensor  # [S] bool
    budget: int

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])


def _with_done(
    src: list[int], tok: list[int], dst: list[int], accepting: list[int], done: int, eos: int,
    budget: int,
) -> TokenAutomaton:
    """The automaton of answer edges ``src -tok-> dst`` over states ``0..done-1``, completed by
    the ``[EOS]`` convention: each accepting state -> DONE (= ``done``), DONE -> DONE."""
    src = [*src, *accepting, done]
    tok = [*tok, *[eos] * len(accepting), eos]
    dst = [*dst, *[done] * len(accepting), done]
    accept = torch.zeros(done + 1, dtype=torch.bool)
    accept[accepting] = True
    accept[done] = True
    as_long = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    return TokenAutomaton(done + 1, as_long(src), as_long(tok), as_long(dst), accept, budget)


def transitions_automaton(
    initial: int, transitions: dict, finals: set[int], eos: int, budget: int, field_name: str
) -> TokenAutomaton:
    """The automaton of outlines-core's ``transitions`` from ``initial`` (``finals`` accepting,
    outlines' own ``eos`` loops replaced by the DONE state), refused past the size limits."""
    reachable, todo = {initial}, [initial]
    while todo:  # states before a sentinel (see regex_index) are left out
        for nxt in transitions.get(todo.pop(), {}).values():
            if nxt not in reachable:
                reachable.add(nxt)
                todo.append(nxt)
    transitions = {s: targets for s, targets in transitions.items() if s in reachable}
    states = {initial: 0}
    for state in transitions:
        states.setdefault(state, len(states))
    for targets in transitions.values():
        for nxt in targets.values():
            states.setdefault(nxt, len(states))
    done = len(states)
    src: list[int] = []
    tok: list[int] = []
    dst: list[int] = []
    for state, targets in transitions.items():
        for token_id, nxt in targets.items():
            if token_id == eos:
                continue  # outlines' own end loop; replaced by the DONE state below
            src.append(states[state])
            tok.append(token_id)
            dst.append(states[nxt])
    accepting = [states[state] for state in finals if state in states]
    edges = len(src) + len(accepting) + 1
    if edges > MAX_EDGES or done + 1 > MAX_STATES:
        raise SchemaError(
            f"answer automaton too large ({done + 1} states, {edges} edges; limits "
            f"{MAX_STATES} / {MAX_EDGES})",
            field_name,
        )
    return _with_done(src, tok, dst, accepting, done, eos, budget)


def char_dfa_automaton(
    transitions: list[dict[str, int]], accept: list[bool], ctx: TokenizerContext, budget: int
) -> TokenAutomaton:
    """Lift a character DFA (state 0 initial, ASCII alphabet) to tokens: a token is an edge when
    its whole text walks the DFA from one state to another; the [EOS]/DONE convention as above."""
    alphabet = {ch for row in transitions for ch in row}
    tokens = [
        (data.decode("ascii"), ids) for data, ids in ctx.by_bytes.items()
        if data.isascii() and set(data.decode("ascii")) <= alphabet
    ]
    src: list[int] = []
    tok: list[int] = []
    dst: list[int] = []
    for state in range(len(transitions)):
        for text, token_ids in tokens:
            target: int | None = state
            for ch in text:
                target = transitions[target].get(ch)
                if target is None:
                    break
            if target is not None:
                src += [state] * len(token_ids)
                tok += token_ids
                dst += [target] * len(token_ids)
    accepting = [state for state, final in enumerate(accept) if final]
    return _with_done(src, tok, dst, accepting, len(transitions), ctx.special.eos, budget)


def literal_automaton(text: str, ctx: TokenizerContext, budget: int) -> TokenAutomaton:
    """Automaton of the single string ``text``: every tokenisation of its bytes (byte offsets)."""
    data = text.encode("utf-8")
    n = len(data)
    src: list[int] = []
    tok: list[int] = []
    dst: list[int] = []
    for i in range(n):
        for j in range(i + 1, min(n, i + ctx.max_piece) + 1):
            for token_id in ctx.by_bytes.get(data[i:j], ()):
                src += [i]
                tok += [token_id]
                dst += [j]
    return _with_done(src, tok, dst, [n], n + 1, ctx.special.eos, budget)


def shortest_answer(automaton: TokenAutomaton) -> int:
    """Fewest tokens of an accepted answer ([EOS] padding excluded), by breadth-first search."""
    src, dst = automaton.src.tolist(), automaton.dst.tolist()
    succ: dict[int, set[int]] = {}
    for a, b in zip(src, dst, strict=True):
        succ.setdefault(a, set()).add(b)
    accept = automaton.accept.tolist()
    done = automaton.num_states - 1  # reached only through [EOS]
    frontier, seen, depth = {0}, {0}, 0
    while frontier:
        if any(accept[s] and s != done for s in frontier):
            return depth
        frontier = {b for s in frontier for b in succ.get(s, ()) if b not in seen and b != done}
        seen |= frontier
        depth += 1
    return 1 << 30


def automaton_bytes(automaton: TokenAutomaton) -> int:
    """The memory an automaton's tensors hold."""
    tensors = (automaton.src, automaton.tok, automaton.dst, automaton.accept)
    return sum(t.numel() * t.element_size() for t in tensors)
