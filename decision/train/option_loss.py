"""The option loss: the negative log-probability the option scorer gives the gold answer.

The block-diffusion loss (masking.py) trains every token under random masks over the whole
vocabulary. A ``choice`` slot decoded by option scoring (``decision.joint.scoring``) is read
differently: per order (left to right, right to left) an option's probability is the chain rule
over its tokens, each factor normalised over the tokens that continue some option given the
tokens fixed before it, and the answer is the option of highest mean probability over the
orders. This loss is ``-log`` of exactly that mean for the gold option, so it trains the
quantity the decoder ranks by (a softmax over the options, not over strings): in the
Xiangqi player, the gold move against the other legal moves.

For one slot of ``L`` tokens and the orders ``(left_to_right, right_to_left)`` it takes ``2L - 1``
forwards of the block (the first level is the fully masked slot in both orders), each with the
gold's tokens fixed at the positions scored before; a factor with a single candidate token is 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from decision.joint.scoring import ORDERS, Denoiser, SlotOptions, order_positions

# block ids [B, L] -> logits [B, L, V]
BlockDenoiser = Callable[[torch.Tensor], torch.Tensor]


def gold_option_log_probs(
    denoise: BlockDenoiser,
    blocks: torch.Tensor,
    slots: Sequence[SlotOptions],
    mask_token_id: int,
    orders: Sequence[str] = ORDERS,
) -> torch.Tensor:
    """log of the option scorer's probability of each slot's gold option: ``[len(slots)]``.

    ``blocks`` [B, L] hold the gold answers in their slots (a training row's block); each slot
    names its batch row, start and options (``[EOS]``-padded, the gold among them), at most one
    slot per row. Differentiable through ``denoise``.
    """
    per_order = gold_order_log_probs(denoise, blocks, slots, mask_token_id, orders)
    return torch.logsumexp(per_order, dim=1) - math.log(len(orders))


def gold_order_log_probs(
    denoise: BlockDenoiser,
    blocks: torch.Tensor,
    slots: Sequence[SlotOptions],
    mask_token_id: int,
    orders: Sequence[str] = ORDERS,
) -> torch.Tensor:
    """log of each order's own chain-rule probability of each slot's gold option:
    ``[len(slots), len(orders)]`` (the scorer's probability is their mean in probability)."""
    if not orders:
        raise ValueError("at least one scoring order is needed")
    rows = [slot.row for slot in slots]
    if len(set(rows)) != len(rows):
        raise ValueError("the option loss takes at most one scored slot per row")
    if not slots:
        return torch.zeros(0, len(orders))
    golds = [tuple(blocks[s.row, s.start : s.start + s.length].tolist()) for s in slots]
    for slot, gold in zip(slots, golds, strict=True):
        if gold not in slot.sequences:
            raise ValueError(f"row {slot.row}: the gold tokens {gold} are not among its options")
    masked = blocks.clone()
    for slot in slots:
        masked[slot.row, slot.start : slot.start + slot.length] = mask_token_id
    depth = max(slot.length for slot in slots)
    row_index = torch.tensor(rows, dtype=torch.long, device=blocks.device)
    terms: list[list[list[torch.Tensor]]] = [[[] for _ in orders] for _ in slots]
    first_level: torch.Tensor | None = None  # level 0 is the same block in every order
    for o, order in enumerate(orders):
        perms = [order_positions(order, slot.length) for slot in slots]
        for level in range(depth):
            active = [i for i, s in enumerate(slots) if level < s.length]
            ids = masked.clone()
            for i in active:
                slot, perm = slots[i], perms[i]
                for p in perm[:level]:
                    ids[slot.row, slot.start + p] = golds[i][p]
            if level == 0 and first_level is not None:
                logits = first_level
            else:
                logits = denoise(ids)
                if level == 0:
                    first_level = logits
            columns = torch.tensor([slots[i].start + perms[i][level] for i in active],
                                   device=blocks.device)
            at = logits[row_index[active], columns].float()  # [n, V]
            allowed = torch.zeros_like(at, dtype=torch.bool)
            targets = []
            for j, i in enumerate(active):
                slot, perm = slots[i], perms[i]
                fixed, here = perm[:level], perm[level]
                candidates = {seq[here] for seq in slot.sequences
                              if all(seq[p] == golds[i][p] for p in fixed)}
                allowed[j, sorted(candidates)] = True
                targets.append(golds[i][here])
            lp = torch.log_softmax(at.masked_fill(~allowed, -torch.inf), dim=-1)
            picked = lp.gather(1, torch.tensor(targets, device=lp.device)[:, None]).squeeze(1)
            for j, i in enumerate(active):
                terms[i][o].append(picked[j])
    return torch.stack([torch.stack([torch.stack(t).sum() for t in by_order])
                        for by_order in terms])  # [slots, orders]


def option_loss(
    denoise: BlockDenoiser,
    blocks: torch.Tensor,
    slots: Sequence[SlotOptions],
    mask_token_id: int,
    orders: Sequence[str] = ORDERS,
    each_order: bool = False,
) -> torch.Tensor:
    """Mean over the scored slots of ``-log P(gold option)`` (0 without any).

    ``each_order``: the mean over the orders of ``-log`` each order's own probability instead
    of ``-log`` of their mixture, so that no order can leave the gold to another: ``-log`` of
    the orders' geometric mean, an upper bound on the mixture's loss (Jensen).
    """
    if not slots:
        return blocks.new_zeros((), dtype=torch.float32)
    if each_order:
        return -gold_order_log_probs(denoise, blocks, slots, mask_token_id, orders).mean()
    return -gold_option_log_probs(denoise, blocks, slots, mask_token_id, orders).mean()


def option_set_log_probs(
    denoise: Denoiser,
    blocks: torch.Tensor,
    slots: Sequence[SlotOptions],
    sets: Sequence[Sequence[int]],
    mask_token_id: int,
    orders: Sequence[str] = ORDERS,
) -> torch.Tensor:
    """log of the option scorer's probability that each slot's answer is in its set:
    ``[len(slots)]``, ``sets[k]`` indexing ``slots[k].sequences``.

    The scorer's probability of a set is the sum of its options' probabilities
    (:func:`option_member_log_probs`). Differentiable through ``denoise``.
    """
    members = option_member_log_probs(denoise, blocks, slots, sets, mask_token_id, orders)
    return torch.stack([torch.logsumexp(m, dim=0) for m in members]) if members \
        else torch.zeros(0)


def option_member_log_probs(
    denoise: Denoiser,
    blocks: torch.Tensor,
    slots: Sequence[SlotOptions],
    sets: Sequence[Sequence[int]],
    mask_token_id: int,
    orders: Sequence[str] = ORDERS,
) -> list[torch.Tensor]:
    """log of the option scorer's probability of each member of each slot's set: one tensor
    ``[len(sets[k])]`` per slot, in the set's order, ``sets[k]`` indexing
    ``slots[k].sequences``.

    An option's probability is the mean over ``orders`` of its chain rule, every factor
    normalised over the tokens that continue *some* option of the slot, as
    :func:`decision.joint.scoring.score_options` does, so only the set's options need
    forwards: per level, one row per distinct block state (slot, fixed tokens) any order of
    any member reaches, all in one ``denoise`` call whose second argument names each row's
    batch row (repeated as often as needed). Differentiable through ``denoise``.
    """
    if not orders:
        raise ValueError("at least one scoring order is needed")
    if len(sets) != len(slots):
        raise ValueError("one set of options is needed per slot")
    if not slots:
        return []
    for k, (slot, members) in enumerate(zip(slots, sets, strict=True)):
        if not members or len(set(members)) != len(members) \
                or not all(0 <= m < len(slot.sequences) for m in members):
            raise ValueError(f"slot {k}: its set must name distinct options of the slot")
    masked = blocks.clone()
    for slot in slots:
        masked[slot.row, slot.start : slot.start + slot.length] = mask_token_id
    perms = [[order_positions(order, slot.length) for order in orders] for slot in slots]
    # one term per (slot, order, member): the sum of that member's factors under that order
    term_of: dict[tuple[int, int, int], int] = {}
    term_slots: list[int] = []
    for k, members in enumerate(sets):
        for o in range(len(orders)):
            for m in members:
                term_of[(k, o, m)] = len(term_slots)
                term_slots.append(k)
    totals = torch.zeros(len(term_slots), device=blocks.device)
    continuing: dict[tuple[int, tuple[tuple[int, int], ...], int], list[int]] = {}
    for level in range(max(slot.length for slot in slots)):
        states: dict[tuple[int, tuple[tuple[int, int], ...]], int] = {}  # -> forward row
        reads: list[tuple[int, int, list[int], int, int]] = []  # term, row, candidates, ...
        for k, (slot, members) in enumerate(zip(slots, sets, strict=True)):
            if level >= slot.length:
                continue
            for o, perm in enumerate(perms[k]):
                fixed, here = perm[:level], perm[level]
                for m in members:
                    seq = slot.sequences[m]
                    state = (k, tuple((p, seq[p]) for p in sorted(fixed)))
                    candidates = continuing.get((*state, here))
                    if candidates is None:  # the tokens that continue some option here
                        candidates = sorted({s[here] for s in slot.sequences
                                             if all(s[p] == t for p, t in state[1])})
                        continuing[(*state, here)] = candidates
                    if len(candidates) == 1:  # probability 1: no factor
                        continue
                    index = states.setdefault(state, len(states))
                    reads.append((term_of[(k, o, m)], index, candidates,
                                  slot.start + here, candidates.index(seq[here])))
        if not reads:
            continue
        ordered = sorted(states, key=states.__getitem__)
        rows = torch.tensor([slots[k].row for k, _ in ordered], device=blocks.device)
        ids = masked.index_select(0, rows).clone()
        for i, (k, fixed) in enumerate(ordered):
            for p, token in fixed:
                ids[i, slots[k].start + p] = token
        logits = denoise(ids, rows)
        width = max(len(r[2]) for r in reads)
        cand = torch.zeros(len(reads), width, dtype=torch.long)
        allowed = torch.zeros(len(reads), width, dtype=torch.bool)
        for j, r in enumerate(reads):
            cand[j, : len(r[2])] = torch.tensor(r[2])
            allowed[j, : len(r[2])] = True
        device = logits.device
        at = logits[torch.tensor([r[1] for r in reads], device=device)[:, None],
                    torch.tensor([r[3] for r in reads], device=device)[:, None],
                    cand.to(device)].float()
        lp = torch.log_softmax(at.masked_fill(~allowed.to(device), -torch.inf), dim=-1)
        picked = lp.gather(1, torch.tensor([r[4] for r in reads], device=device)[:, None])
        totals = totals.index_add(0, torch.tensor([r[0] for r in reads], device=device),
                                  picked.squeeze(1))
    # terms run slot by slot, order by order, member by member: [orders, members] per slot
    out, first = [], 0
    for members in sets:
        n = len(orders) * len(members)
        by_order = totals[first : first + n].view(len(orders), len(members))
        out.append(torch.logsumexp(by_order, dim=0) - math.log(len(orders)))
        first += n
    return out


def option_set_loss(
    denoise: Denoiser,
    blocks: torch.Tensor,
    slots: Sequence[SlotOptions],
    sets: Sequence[Sequence[int]],
    mask_token_id: int,
    orders: Sequence[str] = ORDERS,
) -> torch.Tensor:
    """Mean over the slots of ``-log P(answer in its set)`` (0 without any)."""
    if not slots:
        return blocks.new_zeros((), dtype=torch.float32)
    return -option_set_log_probs(denoise, blocks, slots, sets, mask_token_id, orders).mean()


def soft_option_loss(
    denoise: Denoiser,
    blocks: torch.Tensor,
    slots: Sequence[SlotOptions],
    targets: Sequence[Sequence[tuple[int, float]]],
    mask_token_id: int,
    orders: Sequence[str] = ORDERS,
) -> torch.Tensor:
    """Mean over the slots of the cross-entropy ``-sum_m q_m log P(m)`` from each slot's soft
    targets ``q`` (``(option index, probability)`` pairs, e.g. a teacher's distribution over
    the options: distillation), the probabilities normalised to sum to 1 (0 without any slot).

    A target may cover a few options only (a teacher's most probable ones): its cross-entropy
    then only asks those options for the shares it gives them, and the rest of the slot's
    probability is pushed down through the normalisation of every factor."""
    if not slots:
        return blocks.new_zeros((), dtype=torch.float32)
    for k, target in enumerate(targets):
        if not target or any(q < 0 for _, q in target) or sum(q for _, q in target) <= 0:
            raise ValueError(f"slot {k}: soft targets need non-negative probabilities "
                             "with a positive sum")
    sets = [[m for m, _ in target] for target in targets]
    log_probs = option_member_log_probs(denoise, blocks, slots, sets, mask_token_id, orders)
    losses = []
    for target, lp in zip(targets, log_probs, strict=True):
        q = torch.tensor([p for _, p in target], dtype=lp.dtype, device=lp.device)
        losses.append(-(q / q.sum() * lp).sum())
    return torch.stack(losses).mean()
