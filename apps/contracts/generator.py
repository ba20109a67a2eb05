"""Deterministic generation of contract question groups: ``generate_group(seed, level)``."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator

from apps.contracts import nda, periodic
from apps.contracts.questions import DEPENDS_ON, SCHEMAS, question_text, select
from apps.contracts.types import GeneratedQuestion, Group
from decision.errors import DecisionInputError

KINDS: tuple[str, ...] = (periodic.LEASE, periodic.SERVICES, nda.NDA)
LEVELS: tuple[int, ...] = (1, 2)


def _check(seed: int, level: int) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise DecisionInputError(f"seed must be a non-negative integer, got {seed!r}", "seed")
    if isinstance(level, bool) or level not in LEVELS:
        raise DecisionInputError(f"level must be one of {LEVELS}, got {level!r}", "level")


def generate_group(seed: int, level: int = 2) -> Group:
    """The group for ``seed`` at curriculum ``level`` (1: only the relevant clauses; 2: full).

    The same (seed, level) always gives the same group, on any machine: the random stream is
    seeded with a string, which Python hashes with SHA-512 independently of PYTHONHASHSEED.
    """
    _check(seed, level)
    rng = random.Random(f"apps.contracts:{seed}:{level}")
    kind = rng.choice(KINDS)
    facts: periodic.PeriodicFacts | nda.NdaFacts
    if kind == nda.NDA:
        facts = nda.sample(rng)
        available = nda.answers(facts)
    else:
        facts = periodic.sample(rng, kind)
        available = periodic.answers(facts)
    chosen = select(rng, available)
    needed = frozenset().union(*(available[q].needs for q in chosen))
    if isinstance(facts, nda.NdaFacts):
        document = nda.render(facts, rng, level, needed)
    else:
        document = periodic.render(facts, rng, level, needed)
    questions = [
        GeneratedQuestion(
            id=f"q{i}",
            text=question_text(qtype, kind, rng),
            answer=copy.deepcopy(SCHEMAS[qtype]),
            gold=available[qtype].gold,
            qtype=qtype,
            depends_on=DEPENDS_ON.get(qtype, ()),
        )
        for i, qtype in enumerate(chosen, start=1)
    ]
    return Group(group_id=f"contracts-L{level}-{seed}", kind=kind, document=document,
                 questions=questions, seed=seed, level=level)


def generate_groups(seed_start: int, count: int, level: int = 2) -> Iterator[Group]:
    """Groups for seeds ``seed_start .. seed_start + count - 1``, in order."""
    _check(seed_start, level)
    if count < 0:
        raise DecisionInputError(f"count must be >= 0, got {count}", "count")
    for seed in range(seed_start, seed_start + count):
        yield generate_group(seed, level)
