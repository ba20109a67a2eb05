"""One training row (history + block + which block tokens may be masked) and batch collation.

A row is the unit every objective shares: the model sees ``history`` clean (causal path) and the
``block`` noised (bidirectional path), exactly as ``DecisionModel.forward`` takes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

from decision.joint.scoring import SlotOptions
from decision.train.masking import ROLE_ABSENT

KIND_JOINT = "joint"
KIND_STANDALONE = "standalone"
KIND_DOCUMENT = "document"


@dataclass
class Row:
    """Token ids of one example; ``slot_of[j]`` indexes ``roles`` (-1: never masked)."""

    history_ids: list[int]
    history_segments: list[int]
    block_ids: list[int]
    block_segments: list[int]
    slot_of: list[int]
    roles: list[int]
    kind: str
    meta: dict = field(default_factory=dict)
    # A choice slot's options (token ids, [EOS]-padded to the slot) and the slot's start in the
    # block, for the option loss (option_loss.py); () when the row has none.
    options: tuple[tuple[int, ...], ...] = ()
    options_start: int = -1
    # Indices into ``options`` of the answers the option-set loss counts as acceptable (the
    # gold among them); () when the row has none.
    option_set: tuple[int, ...] = ()
    # Soft targets for the soft option loss: ``(index into options, probability)`` pairs, e.g.
    # a teacher's distribution over the options (distillation); () when the row has none.
    soft_targets: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        n_h, n_b = len(self.history_ids), len(self.block_ids)
        if len(self.history_segments) != n_h or n_h == 0:
            raise ValueError("history ids/segments must have the same, non-zero length")
        if not (len(self.block_segments) == len(self.slot_of) == n_b) or n_b == 0:
            raise ValueError("block ids/segments/slot_of must have the same, non-zero length")
        if self.slot_of and max(self.slot_of) >= len(self.roles):
            raise ValueError("slot_of refers to a slot without a role")
        if self.options:
            length = len(self.options[0])
            if not 0 <= self.options_start <= n_b - length:
                raise ValueError("options_start does not place the options' slot in the block")
            if tuple(self.block_ids[self.options_start : self.options_start + length]) \
                    not in self.options:
                raise ValueError("the block's answer is not among the row's options")
        if self.option_set:
            if not self.options:
                raise ValueError("an option set needs the row's options")
            if len(set(self.option_set)) != len(self.option_set) or not all(
                    0 <= i < len(self.options) for i in self.option_set):
                raise ValueError("the option set must name distinct options of the row")
            length = len(self.options[0])
            answer = tuple(self.block_ids[self.options_start : self.options_start + length])
            if self.options.index(answer) not in self.option_set:
                raise ValueError("the option set must hold the block's answer")
        if self.soft_targets:
            if not self.options:
                raise ValueError("soft targets need the row's options")
            named = [i for i, _ in self.soft_targets]
            if len(set(named)) != len(named) or not all(0 <= i < len(self.options)
                                                        for i in named):
                raise ValueError("soft targets must name distinct options of the row")
            if any(q < 0 for _, q in self.soft_targets) \
                    or sum(q for _, q in self.soft_targets) <= 0:
                raise ValueError("soft targets need non-negative probabilities, sum > 0")


@dataclass
class Batch:
    """Right-padded tensors of a list of rows (masks are True on real tokens)."""

    history_ids: torch.Tensor
    history_mask: torch.Tensor
    history_segments: torch.Tensor
    block_ids: torch.Tensor
    block_mask: torch.Tensor
    block_segments: torch.Tensor
    slot_of: torch.Tensor
    roles: torch.Tensor
    n_tokens: int  # real history + block tokens: what the tokens/s figure counts
    scored_slots: tuple[SlotOptions, ...] = ()  # the rows' options (Row.options), by batch row
    # per scored slot, its row's option set (Row.option_set; () for a row without one)
    scored_sets: tuple[tuple[int, ...], ...] = ()
    # per scored slot, its row's soft targets (Row.soft_targets; () for a row without)
    scored_soft: tuple[tuple[tuple[int, float], ...], ...] = ()

    def to(self, device: torch.device) -> Batch:
        """The same batch on ``device`` (tensors already there are not copied)."""
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in moved.items():
            if isinstance(value, torch.Tensor):
                moved[name] = value.to(device, non_blocking=True)
        return Batch(**moved)


def _pad(seqs: list[list[int]], value: int) -> torch.Tensor:
    width = max(len(s) for s in seqs)
    out = torch.full((len(seqs), width), value, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


def collate(rows: list[Row], pad_token_id: int) -> Batch:
    """Stack rows into right-padded tensors; padded block tokens get ``slot_of = -1``."""
    if not rows:
        raise ValueError("cannot collate an empty list of rows")
    hist = _pad([r.history_ids for r in rows], pad_token_id)
    block = _pad([r.block_ids for r in rows], pad_token_id)
    hist_mask = _pad([[1] * len(r.history_ids) for r in rows], 0).bool()
    block_mask = _pad([[1] * len(r.block_ids) for r in rows], 0).bool()
    roles = _pad([r.roles or [ROLE_ABSENT] for r in rows], ROLE_ABSENT)
    return Batch(
        history_ids=hist,
        history_mask=hist_mask,
        history_segments=_pad([r.history_segments for r in rows], 0),
        block_ids=block,
        block_mask=block_mask,
        block_segments=_pad([r.block_segments for r in rows], 0),
        slot_of=_pad([r.slot_of for r in rows], -1),
        roles=roles,
        n_tokens=int(hist_mask.sum() + block_mask.sum()),
        scored_slots=tuple(SlotOptions(b, r.options_start, r.options)
                           for b, r in enumerate(rows) if r.options),
        scored_sets=tuple(r.option_set for r in rows if r.options),
        scored_soft=tuple(r.soft_targets for r in rows if r.options),
    )
