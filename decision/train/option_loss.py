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

from decision.joint.scoring import ORDERS, SlotOptions, order_positions

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
    if not orders:
        raise ValueError("at least one scoring order is needed")
    rows = [slot.row for slot in slots]
    if len(set(rows)) != len(rows):
        raise ValueError("the option loss takes at most one scored slot per row")
    if not slots:
        return torch.zeros(0)
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
    per_order = torch.stack([torch.stack([torch.stack(t).sum() for t in by_order])
                             for by_order in terms])  # [slots, orders]
    return torch.logsumexp(per_order, dim=1) - math.log(len(orders))


def option_loss(
    denoise: BlockDenoiser,
    blocks: torch.Tensor,
    slots: Sequence[SlotOptions],
    mask_token_id: int,
    orders: Sequence[str] = ORDERS,
) -> torch.Tensor:
    """Mean over the scored slots of ``-log P(gold option)`` (0 without any)."""
    if not slots:
        return blocks.new_zeros((), dtype=torch.float32)
    return -gold_option_log_probs(denoise, blocks, slots, mask_token_id, orders).mean()
