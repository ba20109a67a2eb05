"""Example contracts of the demo: generated documents (validation seeds) with a preset each.

Each ``<kind>-<n>.json`` holds one generated agreement, the id of the preset that fits its kind,
the preset's questions as ``POST /decide`` takes them, and the answers the independent checker
(``apps.contracts.checker``) reads off the text (``null`` where the document does not state the
fact an integer question asks for). ``build.py`` writes them; ``load_examples`` reads them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from apps.contracts.generator import KINDS
from decision.errors import DecisionInputError

EXAMPLES_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Example:
    """One shipped example contract."""

    id: str
    title: str
    kind: str
    seed: int
    split: str
    level: int
    group_id: str
    preset: str
    document: str
    questions: list[dict[str, Any]]
    expected: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "title": self.title, "kind": self.kind, "seed": self.seed,
            "split": self.split, "level": self.level, "group_id": self.group_id,
            "preset": self.preset, "document": self.document, "questions": self.questions,
            "expected": self.expected,
        }


def _order(path: Path) -> tuple[int, int, str]:
    kind, _, number = path.stem.rpartition("-")
    rank = KINDS.index(kind) if kind in KINDS else len(KINDS)
    return rank, int(number) if number.isdigit() else 0, path.stem


@lru_cache(maxsize=1)
def load_examples() -> tuple[Example, ...]:
    """Every shipped example, lease first, then services, then NDA, each in number order."""
    examples = []
    for path in sorted(EXAMPLES_DIR.glob("*.json"), key=_order):
        data = json.loads(path.read_text(encoding="utf-8"))
        examples.append(Example(**data))
    return tuple(examples)


def get_example(number: int) -> Example:
    """The example by its 1-based number in ``load_examples()`` order."""
    examples = load_examples()
    if isinstance(number, bool) or not isinstance(number, int) or not (
            1 <= number <= len(examples)):
        raise DecisionInputError(
            f"example must be a number from 1 to {len(examples)}, got {number!r}", "example")
    return examples[number - 1]
