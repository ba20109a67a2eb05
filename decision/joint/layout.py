"""The token layout of a decision pass, shared by decoding and training.

History: ``<doc> document`` then, per question i (1-based), ``<qi> question text``.
Block: per question i, ``<ai>`` followed by its slot of ``budget_i`` tokens: ``[MASK]`` when
decoding, or the answer's tokens padded with ``[EOS]`` when training. Segment ids tie question
i's tokens and its slot (id i); the document, ``<doc>`` included, has segment 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from decision.errors import DecisionInputError
from decision.tokenizer import MAX_QUESTIONS, SpecialIds


@dataclass(frozen=True)
class SlotSpan:
    """One answer slot: ``length`` tokens from ``start`` (absolute position in the sequence)."""

    question: int  # 0-based question index
    start: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass(frozen=True)
class Layout:
    """A full sequence (history then block) with the per-token annotations."""

    input_ids: list[int]
    segment_ids: list[int]
    block_ids: list[int]  # 0: history, 1: the answer block
    slot_mask: list[bool]  # True on slot tokens (not on the <ai> markers)
    slots: tuple[SlotSpan, ...]
    document_length: int  # tokens of "<doc> document"
    history_length: int  # document plus questions

    @property
    def history_ids(self) -> list[int]:
        return self.input_ids[: self.history_length]

    @property
    def history_segments(self) -> list[int]:
        return self.segment_ids[: self.history_length]

    @property
    def block(self) -> list[int]:
        return self.input_ids[self.history_length :]

    @property
    def block_segments(self) -> list[int]:
        return self.segment_ids[self.history_length :]

    def block_slots(self) -> list[SlotSpan]:
        """The slots with ``start`` relative to the block."""
        h = self.history_length
        return [SlotSpan(s.question, s.start - h, s.length) for s in self.slots]


def build_layout(
    special: SpecialIds,
    document_ids: Sequence[int],
    question_ids: Sequence[Sequence[int]],
    budgets: Sequence[int],
    answers: Sequence[Sequence[int]] | None = None,
) -> Layout:
    """Lay out a document, 1..8 questions and their slots (``answers``: fill slots for training).

    ``answers[i]`` are answer i's token ids without padding; they must fit ``budgets[i]``.
    """
    count = len(question_ids)
    if not 1 <= count <= MAX_QUESTIONS:
        raise DecisionInputError(f"a pass holds 1..{MAX_QUESTIONS} questions, got {count}",
                                 "questions")
    if len(budgets) != count or (answers is not None and len(answers) != count):
        raise DecisionInputError("one budget (and answer) per question is needed", "questions")
    ids: list[int] = [special.doc, *document_ids]
    seg: list[int] = [0] * len(ids)
    document_length = len(ids)
    for i, question in enumerate(question_ids):
        ids += [special.questions[i], *question]
        seg += [i + 1] * (len(question) + 1)
    history_length = len(ids)
    slots: list[SlotSpan] = []
    for i, budget in enumerate(budgets):
        if budget < 1:
            raise DecisionInputError(f"slot budget must be >= 1, got {budget}",
                                     f"questions.{i}.answer")
        ids.append(special.answers[i])
        slots.append(SlotSpan(i, len(ids), budget))
        if answers is None:
            content = [special.mask] * budget
        else:
            answer = list(answers[i])
            if len(answer) > budget:
                raise DecisionInputError(
                    f"answer has {len(answer)} tokens, more than its slot's {budget}",
                    f"questions.{i}.answer",
                )
            content = answer + [special.eos] * (budget - len(answer))
        ids += content
        seg += [i + 1] * (budget + 1)
    slot_mask = [False] * len(ids)
    for span in slots:
        slot_mask[span.start : span.end] = [True] * span.length
    block_ids = [0] * history_length + [1] * (len(ids) - history_length)
    return Layout(ids, seg, block_ids, slot_mask, tuple(slots), document_length, history_length)
