"""Generated lease-like text for tiny tokenizers in tests and benchmarks (no downloads)."""

from __future__ import annotations

import random
from typing import Any

_NAMES = ("Alice Moreau", "Bruno Keller", "Chen Wei", "Dana Ortiz", "Emeka Obi", "Farah Haddad")
_CLAUSES = (
    "The tenant shall give {n} days of written notice before leaving the premises.",
    "Rent of {n} euros is due on day {d} of each month, with a grace period of {g} days.",
    "A late fee of {n} euros applies after {g} days; {name} may retain the deposit.",
    "The landlord {name} received notice {n} days before the end of the term.",
    "Is the notice timely? Answer yes or no. How many days of notice were given?",
    "The agreement renews automatically for {n} months unless either party objects.",
    "Earlier late payments: {d}. The deposit of {n} euros is held in escrow.",
    "Which party pays for repairs: tenant, landlord, or not stated?",
)


def lease_sentences(count: int, seed: int = 0) -> list[str]:
    """``count`` generated contract sentences with varied names and numbers."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        template = rng.choice(_CLAUSES)
        out.append(
            template.format(
                n=rng.randint(0, 2000), d=rng.randint(1, 31), g=rng.randint(0, 15),
                name=rng.choice(_NAMES),
            )
        )
    return out


def lease_document(sentences: int, seed: int = 0) -> str:
    """One document of ``sentences`` generated sentences."""
    return " ".join(lease_sentences(sentences, seed))


def toy_model(
    seed: int = 0,
    max_positions: int = 512,
    vocab_size: int = 400,
    hidden_size: int = 32,
    layers: int = 2,
    corpus_sentences: int = 300,
    num_segments: int = 9,
) -> Any:
    """A random-weight model (GDN layers then one attention layer) with a toy tokenizer.

    Block-path parameters are randomised too, so the block path is exercised. For tests and
    benchmarks only: it knows nothing. The caller's torch random state is left as it was.
    """
    import torch

    from decision.model import DecisionConfig, DecisionModel
    from decision.model.testing import randomize_block_params
    from decision.tokenizer import special_ids, train_tokenizer

    tok = train_tokenizer(lease_sentences(corpus_sentences), vocab_size=vocab_size)
    sp = special_ids(tok)
    heads = max(hidden_size // 16, 2)
    config = DecisionConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=hidden_size, num_hidden_layers=layers,
        layer_types=["linear_attention"] * (layers - 1) + ["full_attention"],
        num_attention_heads=heads, num_key_value_heads=1, head_dim=16,
        linear_num_key_heads=max(heads // 2, 1), linear_num_value_heads=heads,
        linear_key_head_dim=16, linear_value_head_dim=16, intermediate_size=2 * hidden_size,
        mask_token_id=sp.mask, pad_token_id=sp.pad, eos_token_id=sp.eos,
        max_position_embeddings=max_positions, num_segments=num_segments,
    )
    with torch.random.fork_rng(devices=[]):  # seeded here, not for the caller
        torch.manual_seed(seed)
        model = DecisionModel(config, tok).eval()
    randomize_block_params(model, torch.Generator().manual_seed(seed + 1))
    return model
