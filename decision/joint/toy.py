"""Generated lease-like text for tiny tokenizers in tests and benchmarks (no downloads)."""

from __future__ import annotations

import random

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
