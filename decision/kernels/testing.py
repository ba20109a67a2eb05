"""Random inputs for the kernel tests and the GPU benchmark, so both exercise the same data."""

from __future__ import annotations

import torch

GATES = ("mixed", "near0", "near1")


def random_gates(shape: tuple[int, ...], gate: str, gen: torch.Generator,
                 device: str | torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Log-decays g <= 0: ``near1`` keeps exp(g) ~ 1 (long memory), ``near0`` ~ 0 (forgetting)."""
    r = torch.rand(shape, generator=gen, dtype=torch.float64)
    if gate == "near1":
        g = -1e-3 * r
    elif gate == "near0":
        g = -(10.0 + 20.0 * r)  # exp(g) in [1e-13, 5e-5]
    elif gate == "mixed":
        g = torch.log(r.clamp_min(1e-6)) * 0.5
    else:
        raise ValueError(f"gate must be one of {GATES}, got {gate!r}")
    return g.to(device=device, dtype=dtype)


def gdn_inputs(
    b: int, t: int, hk: int, hv: int, dk: int, dv: int, *, gate: str = "mixed",
    n_states: int | None = None, dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu", seed: int = 0,
) -> dict[str, torch.Tensor]:
    """Inputs of ``chunk_gated_delta_rule``, with an initial state for ``n_states`` sequences."""
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape: int, s: float = 1.0) -> torch.Tensor:
        x = torch.randn(shape, generator=gen, dtype=torch.float64) * s
        return x.to(device=device, dtype=dtype)

    out = {
        "q": rnd(b, t, hk, dk), "k": rnd(b, t, hk, dk), "v": rnd(b, t, hv, dv),
        "g": random_gates((b, t, hv), gate, gen, device, dtype), "beta": rnd(b, t, hv, s=2.0),
    }
    if n_states is not None:
        out["initial_state"] = rnd(n_states, hv, dk, dv, s=0.5).float()
        if dtype == torch.float64:
            out["initial_state"] = out["initial_state"].double()
    return out


def block_inputs(
    b: int, l_: int, hk: int, hv: int, dk: int, dv: int, *, dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu", seed: int = 0, ragged: bool = True,
) -> dict[str, torch.Tensor]:
    """Inputs of ``block_attention``; ``ragged`` gives rows different valid lengths (>= 1)."""
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape: int, s: float = 1.0) -> torch.Tensor:
        return (torch.randn(shape, generator=gen, dtype=torch.float64) * s).to(device=device)

    lengths = torch.randint(1, l_ + 1, (b,), generator=gen) if ragged else torch.full((b,), l_)
    lengths[0] = l_
    mask = (torch.arange(l_)[None, :] < lengths[:, None]).to(device)
    sdt = torch.float64 if dtype == torch.float64 else torch.float32
    return {
        "q": rnd(b, l_, hk, dk).to(dtype), "k": rnd(b, l_, hk, dk).to(dtype),
        "v": rnd(b, l_, hv, dv).to(dtype), "state": rnd(b, hv, dk, dv, s=0.5).to(sdt),
        "history_logit": rnd(b, l_, hv).to(dtype),
        "scale": (2.0 + 8.0 * torch.rand(hv, generator=gen, dtype=torch.float64)).to(device, sdt),
        "calibration": (0.5 + torch.rand(hv, generator=gen, dtype=torch.float64)).to(device, sdt),
        "block_mask": mask,
    }
