"""Training-time validation: per-question-type accuracy of unconstrained greedy decoding.

This is a cheap monitor, not the product's decoder (``decide_many`` adds schema constraints):
the answer block starts fully masked; each step fixes every masked token whose top probability
passes ``threshold`` (at least the single most confident one per row), as Fast-dLLM's threshold
rule does. A slot is correct when all its tokens (answer and end padding) equal the gold ones.
The majority baseline per question type (most common gold answer of that type in the validation
set) is reported beside it, so a run that learns nothing shows it at once.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import torch

from decision.train.rows import Row, collate


def _logits(model: Any, batch: Any, block: torch.Tensor, cache: Any) -> torch.Tensor:
    if cache is not None:
        return model.denoise(block, cache, block_mask=batch.block_mask,
                             segment_ids=batch.block_segments)
    return model(
        batch.history_ids, block, history_mask=batch.history_mask, block_mask=batch.block_mask,
        history_segments=batch.history_segments, block_segments=batch.block_segments,
    )


@torch.no_grad()
def greedy_fill(
    model: Any,
    rows: list[Row],
    pad_token_id: int,
    mask_token_id: int,
    threshold: float = 0.9,
    max_steps: int = 8,
) -> torch.Tensor:
    """Decode every maskable block token of ``rows``; returns the filled block ids ``[B, L]``.

    Uses ``prefill`` once and ``denoise`` per step when the model has them (the history is then
    computed once), else the training ``forward``. At most ``max_steps`` forwards: the number
    fixed per step is raised so the block is complete by the last step.
    """
    batch = collate(rows, pad_token_id).to(next(model.parameters()).device)
    todo = batch.slot_of >= 0
    block = torch.where(todo, torch.full_like(batch.block_ids, mask_token_id), batch.block_ids)
    cache = None
    if hasattr(model, "prefill") and hasattr(model, "denoise"):
        cache = model.prefill(batch.history_ids, attention_mask=batch.history_mask,
                              segment_ids=batch.history_segments)
    for step in range(max_steps):
        if not bool(todo.any()):
            break
        probs = _logits(model, batch, block, cache).float().softmax(-1)
        probs[..., mask_token_id] = 0.0
        conf, pred = probs.max(-1)
        conf = torch.where(todo, conf, torch.full_like(conf, -1.0))
        steps_left = max_steps - step
        # per row: the count needed to finish in time, and at least one
        need = (todo.sum(1) + steps_left - 1) // steps_left
        order = conf.argsort(dim=1, descending=True).argsort(dim=1)  # rank of each position
        fix = todo & ((conf >= threshold) | (order < need[:, None].clamp(min=1)))
        block = torch.where(fix, pred, block)
        todo = todo & ~fix
    return block


def slot_correct(rows: list[Row], filled: torch.Tensor) -> list[list[bool]]:
    """Per row, per slot: all the slot's tokens equal the gold block tokens."""
    out = []
    for b, row in enumerate(rows):
        ok: dict[int, bool] = {}
        for j, s in enumerate(row.slot_of):
            if s >= 0:
                ok[s] = ok.get(s, True) and int(filled[b, j]) == row.block_ids[j]
        out.append([ok[s] for s in sorted(ok)])
    return out


def score_rows(
    model: Any,
    rows: list[Row],
    pad_token_id: int,
    mask_token_id: int,
    batch_size: int = 32,
) -> list[list[bool]]:
    """Greedy-decode ``rows`` in batches and return per-slot correctness."""
    model.eval()
    out: list[list[bool]] = []
    for i in range(0, len(rows), batch_size):
        chunk = rows[i : i + batch_size]
        out.extend(slot_correct(chunk, greedy_fill(model, chunk, pad_token_id, mask_token_id)))
    return out


def accuracy_report(
    joint_rows: list[Row],
    joint_ok: list[list[bool]],
    standalone_rows: list[Row],
    standalone_ok: list[list[bool]],
) -> dict[str, Any]:
    """Per-question and per-type accuracy, groups fully correct, and the majority baseline.

    Rows carry ``meta["qtypes"]`` and ``meta["gold"]`` (one entry per slot, in slot order).
    """
    by_type: dict[str, list[bool]] = defaultdict(list)
    gold_by_type: dict[str, Counter[str]] = defaultdict(Counter)
    for row, oks in zip(joint_rows, joint_ok, strict=True):
        for qt, gold, ok in zip(row.meta["qtypes"], row.meta["gold"], oks, strict=True):
            by_type[qt].append(ok)
            gold_by_type[qt][gold] += 1
    sa_by_type: dict[str, list[bool]] = defaultdict(list)
    for row, oks in zip(standalone_rows, standalone_ok, strict=True):
        for qt, ok in zip(row.meta["qtypes"], oks, strict=True):
            sa_by_type[qt].append(ok)
    n = sum(len(v) for v in by_type.values())
    majority = sum(c.most_common(1)[0][1] for c in gold_by_type.values()) / max(1, n)
    joint = sum(sum(v) for v in by_type.values()) / max(1, n)
    n_sa = sum(len(v) for v in sa_by_type.values())
    standalone = sum(sum(v) for v in sa_by_type.values()) / max(1, n_sa)
    return {
        "joint": round(joint, 4),
        "standalone": round(standalone, 4),
        "majority": round(majority, 4),
        "gain_over_majority": round(joint - majority, 4),
        "groups_correct_joint": round(sum(all(o) for o in joint_ok) / max(1, len(joint_ok)), 4),
        "per_type": {
            qt: {
                "joint": round(sum(v) / len(v), 3),
                "standalone": round(sum(sa_by_type[qt]) / max(1, len(sa_by_type[qt])), 3),
                "majority": round(gold_by_type[qt].most_common(1)[0][1] / len(v), 3),
                "n": len(v),
            }
            for qt, v in sorted(by_type.items())
        },
    }
