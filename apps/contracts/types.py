"""The data a generated contract group carries: a document and up to eight typed questions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Gold = str | bool | int

CHOICE_YES = "yes"
CHOICE_NO = "no"
NOT_STATED = "not stated"
TRI_OPTIONS: tuple[str, str, str] = (CHOICE_YES, CHOICE_NO, NOT_STATED)


@dataclass(frozen=True)
class GeneratedQuestion:
    """One question of a group.

    ``answer`` is the answer schema as a plain dict in the decoder's format
    (``{"type": "choice", "options": [...]}``, ``{"type": "boolean"}``,
    ``{"type": "integer", "minimum": a, "maximum": b}``); ``gold`` is the typed answer (option
    string, bool or int); ``depends_on`` lists the question types this one is derived from by a
    rule (empty for extraction questions).
    """

    id: str
    text: str
    answer: dict[str, Any]
    gold: Gold
    qtype: str
    depends_on: tuple[str, ...] = ()

    @property
    def is_derived(self) -> bool:
        """True when the answer follows by a rule from other question types."""
        return bool(self.depends_on)


@dataclass(frozen=True)
class Group:
    """A document with 1 to 8 questions about it, generated from ``seed`` at ``level``."""

    group_id: str
    kind: str
    document: str
    questions: list[GeneratedQuestion]
    seed: int = -1
    level: int = 2


@dataclass(frozen=True)
class RuleAnswer:
    """A question type's gold answer for one document and the clauses the answer reads.

    ``needs`` names the clauses and events a document must show for the answer to follow from it
    (a level-1 document renders only these); a clause that is absent on purpose (the reason for a
    "not stated") is simply not in the document.
    """

    gold: Gold
    needs: frozenset[str]
