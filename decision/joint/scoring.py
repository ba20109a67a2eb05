"""Option scoring: the probability of every option of a closed answer set, by the chain rule.

Denoising fixes a slot's tokens a few at a time and reports option probabilities from one
factorised step (docs/decoding.md). For a ``choice`` or ``boolean`` question the set of answers
is small enough to score outright: for one decoding order over the slot's positions, an option's
probability is the product, position by position in that order, of the model's probability of
its token at that position given its tokens at the positions before (every other slot position
still ``[MASK]``), normalised over the tokens that continue some option (the constraint). Per
order the option probabilities sum to 1; the reported probability is their mean over the
orders (a mixture: the model is trained on every order, and no one order is privileged).

Each option is scored in its canonical tokenisation (the tokenizer's own encoding, ``[EOS]``
padded to the slot), the form the training recipe writes answers in. Options that share the
tokens fixed so far share a forward; a position where every such option has the same token
costs none (its probability given the constraint is 1). All slots, orders and prefixes of one
level go through one batched ``denoise`` call, so a slot of ``L`` tokens takes ``L`` forwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

ORDERS = ("left_to_right", "right_to_left")

# (block ids [N, L], the batch row each comes from [N]) -> logits [N, L, V]
Denoiser = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class SlotOptions:
    """The options of one answer slot: ``sequences[o]`` is option o's tokens, ``[EOS]``-padded
    to the slot's length, for the slot at ``start`` in batch row ``row``'s block."""

    row: int
    start: int
    sequences: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        lengths = {len(s) for s in self.sequences}
        if len(lengths) != 1 or 0 in lengths:
            raise ValueError("a slot's option sequences must be non-empty and of one length")
        if len(set(self.sequences)) != len(self.sequences):
            raise ValueError("two options have the same tokens")

    @property
    def length(self) -> int:
        return len(self.sequences[0])


@dataclass(frozen=True)
class ScoredOptions:
    """Per slot, the option probabilities (mixture over ``orders``); per batch row, the
    batched forwards (token levels) it took part in; and per level, which rows took part
    (``level_rows`` ``[levels, B]`` bool: rows of one request may take part in different
    levels, so a request's forwards are the levels any of its rows took part in)."""

    probabilities: list[torch.Tensor]
    row_forwards: torch.Tensor
    level_rows: torch.Tensor


# An explicit order names slot positions: "positions:2,3,0,1" scores position 2 first, then 3, 0
# and 1; positions a slot lacks are skipped and the slot's positions it does not name follow,
# left to right (slots of one request differ in length).
POSITIONS_PREFIX = "positions:"


def order_positions(order: str, length: int) -> list[int]:
    """The slot positions in the order they are scored: ``left_to_right``, ``right_to_left`` or
    an explicit ``positions:i,j,...`` (see :data:`POSITIONS_PREFIX`)."""
    if order == "left_to_right":
        return list(range(length))
    if order == "right_to_left":
        return list(range(length - 1, -1, -1))
    if order.startswith(POSITIONS_PREFIX):
        named = _named_positions(order)
        first = [p for p in named if p < length]
        return first + [p for p in range(length) if p not in named]
    raise ValueError(f"unknown scoring order {order!r}; known: {list(ORDERS)} or "
                     f"'{POSITIONS_PREFIX}i,j,...'")


def _named_positions(order: str) -> list[int]:
    """The distinct non-negative positions an explicit order names, in its order."""
    text = order[len(POSITIONS_PREFIX):]
    try:
        named = [int(part) for part in text.split(",")]
    except ValueError:
        named = []
    if not named or any(p < 0 for p in named) or len(set(named)) != len(named):
        raise ValueError(f"scoring order {order!r}: {POSITIONS_PREFIX} needs distinct "
                         "non-negative positions separated by commas")
    return named


@dataclass(frozen=True)
class _Query:
    """One forward row: ``slot`` under ``order`` with ``prefix`` fixed; ``members`` are the
    options that agree with it and ``candidates`` their distinct next tokens."""

    slot: int
    order: int
    prefix: tuple[int, ...]
    members: tuple[int, ...]
    candidates: tuple[int, ...]


def _queries(slots: Sequence[SlotOptions], perms: list[list[list[int]]], level: int
             ) -> list[_Query]:
    out: list[_Query] = []
    for k, slot in enumerate(slots):
        if level >= slot.length:
            continue
        for o, perm in enumerate(perms[k]):
            fixed, here = perm[:level], perm[level]
            groups: dict[tuple[int, ...], list[int]] = {}
            for m, seq in enumerate(slot.sequences):
                groups.setdefault(tuple(seq[p] for p in fixed), []).append(m)
            for prefix, members in groups.items():
                candidates = sorted({slot.sequences[m][here] for m in members})
                if len(candidates) > 1:  # one candidate: probability 1, no forward
                    out.append(_Query(k, o, prefix, tuple(members), tuple(candidates)))
    return out


def score_options(
    denoise: Denoiser,
    blocks: torch.Tensor,
    slots: Sequence[SlotOptions],
    orders: Sequence[str] = ORDERS,
    max_rows: int = 512,
) -> ScoredOptions:
    """Option probabilities of every slot (module docstring).

    ``blocks`` [B, L]: each batch row's answer block with every slot ``[MASK]``; ``denoise``
    runs the model on rows of it (``max_rows`` at most per call).
    """
    if not orders:
        raise ValueError("at least one scoring order is needed")
    perms = [[order_positions(order, slot.length) for order in orders] for slot in slots]
    logp = [torch.zeros(len(orders), len(slot.sequences), dtype=torch.float64) for slot in slots]
    depth = max((slot.length for slot in slots), default=0)
    level_rows = torch.zeros(depth, blocks.shape[0], dtype=torch.bool)
    for level in range(depth):
        queries = _queries(slots, perms, level)
        # one batched forward per level, however many calls ``max_rows`` splits it into: a
        # row's count depends on its own slots only, not on the batch it shares
        level_rows[level, sorted({slots[q.slot].row for q in queries})] = True
        for begin in range(0, len(queries), max_rows):
            part = queries[begin : begin + max_rows]
            rows = torch.tensor([slots[q.slot].row for q in part], dtype=torch.long)
            ids = blocks.index_select(0, rows).clone()
            columns = []
            for i, q in enumerate(part):
                slot, perm = slots[q.slot], perms[q.slot][q.order]
                for p, token in zip(perm[:level], q.prefix, strict=True):
                    ids[i, slot.start + p] = token
                columns.append(slot.start + perm[level])
            logits = denoise(ids, rows)
            at = logits[torch.arange(len(part)), torch.tensor(columns)].double().cpu()
            for i, q in enumerate(part):
                lp = torch.log_softmax(at[i, list(q.candidates)], dim=-1)
                by_token = dict(zip(q.candidates, lp.tolist(), strict=True))
                sequences, here = slots[q.slot].sequences, perms[q.slot][q.order][level]
                for m in q.members:
                    logp[q.slot][q.order, m] += by_token[sequences[m][here]]
    probabilities = [lp.exp().mean(0).float() for lp in logp]
    return ScoredOptions(probabilities, level_rows.sum(0), level_rows)


def naive_score_options(
    denoise: Denoiser, blocks: torch.Tensor, slots: Sequence[SlotOptions],
    orders: Sequence[str] = ORDERS,
) -> list[torch.Tensor]:
    """Reference for :func:`score_options`: one forward per option, order and position, no
    sharing, no skipping, the chain rule written out."""
    out = []
    for slot in slots:
        mixture = torch.zeros(len(slot.sequences), dtype=torch.float64)
        for order in orders:
            perm = order_positions(order, slot.length)
            for m, seq in enumerate(slot.sequences):
                total = 0.0
                for level, here in enumerate(perm):
                    fixed = perm[:level]
                    agree = [s for s in slot.sequences if all(s[p] == seq[p] for p in fixed)]
                    candidates = sorted({s[here] for s in agree})
                    ids = blocks[slot.row : slot.row + 1].clone()
                    for p in fixed:
                        ids[0, slot.start + p] = seq[p]
                    logits = denoise(ids, torch.tensor([slot.row]))[0, slot.start + here]
                    lp = torch.log_softmax(logits.double()[candidates], dim=-1)
                    total += float(lp[candidates.index(seq[here])])
                mixture[m] += torch.tensor(total, dtype=torch.float64).exp() / len(orders)
        out.append(mixture.float())
    return out
