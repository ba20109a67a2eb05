"""The block-diffusion objective: which block tokens are masked, and how the loss weighs them.

Masked diffusion (MDLM, Sahoo et al. 2024, arXiv 2406.07524, eq. 10; LLaDA, Nie et al. 2025,
arXiv 2502.09992, eq. 3): draw t ~ U(0, 1], mask each token independently with probability t, and
minimise ``-(1/t) * sum_{masked i} log p(x_i | x_t)``, normalised by the number of tokens. Because a
token is masked with probability t, ``E[1{masked}/t] = 1``: the weighted loss is an unbiased
estimate of the sum of per-token cross-entropies, an upper bound on the negative log-likelihood.

**Dependency-aware masking** (DESIGN.md section 6). In a joint group, derived answers (deposit
retention, renewal) are functions of extraction answers (notice days, required days). If every slot
is masked at the same rate, the model never sees a derived slot masked while its inputs are
visible, so it never learns to read them, and joint decoding (which fixes the easy extraction
answers first) gains nothing over standalone. We therefore give each slot its own rate:
derived and ordinary slots use t; an extraction slot in a group that also has derived slots is kept
fully visible with probability ``p_visible`` and otherwise masked at ``scale * t``. Each masked
token is weighted by ``1 / rate`` of its own slot, so every slot's term stays unbiased in the sense
above (the rates only change which contexts the model trains on, not what each term estimates).
Visible slots carry no loss (rate 0, never masked).

**Weighting.** ``"elbo"`` is the 1/rate weighting above. It is unbiased but, for answer slots of
one to three tokens, its variance is extreme: a row drawn at t = 0.02 whose one forced token is
masked weighs 50 (100 for an extraction slot at half rate), and after gradient clipping such rows
dominate the update. ``"row_mean"`` (the default) takes each row's mean cross-entropy over its
masked tokens and weighs rows equally. Any positive weighting of the per-context terms has the same
minimiser, the true conditional p(x_i | visible tokens), which is all decoding uses; the weighting
only sets how much each context counts during training, so we pick the low-variance one, which
also keeps short answer rows from being outweighed by long document blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ROLE_ABSENT = -1  # padding in the per-slot role table
ROLE_PLAIN = 0  # masked at rate t (derived answers, standalone slots, document blocks)
ROLE_EXTRACTION = 1  # an extraction answer in a group that also holds derived answers

LOSS_WEIGHTINGS = ("row_mean", "elbo")


@dataclass
class MaskedBatch:
    """Noised block ids and the per-token loss weights (0 where no loss is taken)."""

    noised: torch.Tensor  # [B, L] long: targets with masked positions set to mask_token_id
    masked: torch.Tensor  # [B, L] bool
    weights: torch.Tensor  # [B, L] float: 1/rate on masked tokens, 0 elsewhere
    n_loss_tokens: int  # maskable tokens in the batch: the loss normaliser

    def to(self, device: torch.device) -> MaskedBatch:
        """The same batch on ``device`` (masks are drawn on the CPU: identical on any device)."""
        return MaskedBatch(self.noised.to(device), self.masked.to(device),
                           self.weights.to(device), self.n_loss_tokens)


def sample_t(batch: int, t_min: float, generator: torch.Generator) -> torch.Tensor:
    """t ~ U[t_min, 1]; t_min > 0 bounds the 1/t weight (the usual epsilon of MDLM)."""
    return t_min + (1.0 - t_min) * torch.rand(batch, generator=generator)


def slot_rates(
    roles: torch.Tensor,
    t: torch.Tensor,
    generator: torch.Generator,
    p_visible: float,
    scale: float,
) -> torch.Tensor:
    """Mask rate of every slot: ``[B, S]`` from roles ``[B, S]`` and t ``[B]``.

    Plain slots get t; extraction slots get 0 (visible) with probability p_visible, else
    scale * t. Absent slots get 0.
    """
    t_col = t[:, None].expand_as(roles).to(torch.float32)
    visible = torch.rand(roles.shape, generator=generator) < p_visible
    extraction_rate = torch.where(visible, torch.zeros_like(t_col), scale * t_col)
    rates = torch.where(roles == ROLE_EXTRACTION, extraction_rate, t_col)
    return torch.where(roles == ROLE_ABSENT, torch.zeros_like(rates), rates)


def apply_mask(
    targets: torch.Tensor,
    slot_of: torch.Tensor,
    rates: torch.Tensor,
    mask_token_id: int,
    generator: torch.Generator,
) -> MaskedBatch:
    """Mask each maskable token (``slot_of >= 0``) with its slot's rate.

    ``slot_of[b, j]`` is the index into ``rates[b]`` of token j's slot, or -1 for tokens that are
    never masked (slot markers, padding). Every row keeps at least one masked token when it has any
    token with a positive rate, so no row is wasted (the forced token's weight is 1/rate too: the
    small bias this adds is the same one LLaDA accepts).
    """
    maskable = slot_of >= 0
    idx = slot_of.clamp(min=0)
    token_rate = torch.gather(rates, 1, idx) * maskable
    u = torch.rand(targets.shape, generator=generator)
    masked = u < token_rate
    # Rows with no masked token: mask the eligible token with the smallest u / rate.
    empty = ~masked.any(dim=1) & (token_rate > 0).any(dim=1)
    if bool(empty.any()):
        score = torch.where(token_rate > 0, u / token_rate.clamp(min=1e-9), torch.inf)
        pick = score.argmin(dim=1)
        forced = torch.zeros_like(masked)
        forced[torch.arange(targets.shape[0]), pick] = True
        masked = masked | (forced & empty[:, None])
    weights = torch.where(masked, 1.0 / token_rate.clamp(min=1e-9), torch.zeros_like(token_rate))
    noised = torch.where(masked, torch.full_like(targets, mask_token_id), targets)
    return MaskedBatch(noised, masked, weights, int(maskable.sum()))


def diffusion_loss(
    logits: torch.Tensor, targets: torch.Tensor, batch: MaskedBatch, weighting: str = "row_mean"
) -> torch.Tensor:
    """The masked-token loss under ``weighting`` (module docstring).

    ``"elbo"``: ``sum_masked (1/rate) * CE / n_maskable`` (MDLM eq. 10 with per-slot rates).
    ``"row_mean"``: the mean over rows with a masked token of each row's mean masked CE.
    """
    if weighting not in LOSS_WEIGHTINGS:
        raise ValueError(f"weighting must be one of {LOSS_WEIGHTINGS}, got {weighting!r}")
    if batch.n_loss_tokens == 0 or not bool(batch.masked.any()):
        return logits.sum() * 0.0
    sel = batch.masked
    ce = torch.nn.functional.cross_entropy(
        logits[sel].float(), targets[sel], reduction="none"
    )
    if weighting == "elbo":
        return (ce * batch.weights[sel]).sum() / batch.n_loss_tokens
    per_token = torch.zeros(targets.shape, dtype=ce.dtype, device=ce.device)
    per_token[sel] = ce
    counts = sel.sum(dim=1)
    has = counts > 0
    row_means = per_token.sum(dim=1)[has] / counts[has].to(ce.dtype)
    return row_means.mean()
