"""The shared layout: markers, segment ties, slot spans, training fill with [EOS] padding."""

from __future__ import annotations

import pytest

from decision.errors import DecisionInputError
from decision.joint.layout import build_layout
from decision.tokenizer import SpecialIds

SP = SpecialIds(pad=0, mask=1, eos=2, doc=3, questions=tuple(range(4, 12)),
                answers=tuple(range(12, 20)))


def test_decoding_layout() -> None:
    lay = build_layout(SP, [100, 101, 102], [[200, 201], [300]], [3, 2])
    assert lay.input_ids == [3, 100, 101, 102, 4, 200, 201, 5, 300,
                             12, 1, 1, 1, 13, 1, 1]
    assert lay.segment_ids == [0, 0, 0, 0, 1, 1, 1, 2, 2, 1, 1, 1, 1, 2, 2, 2]
    assert lay.block_ids == [0] * 9 + [1] * 7
    assert lay.document_length == 4 and lay.history_length == 9
    assert [(s.question, s.start, s.length) for s in lay.slots] == [(0, 10, 3), (1, 14, 2)]
    assert [i for i, m in enumerate(lay.slot_mask) if m] == [10, 11, 12, 14, 15]
    assert [(s.start, s.length) for s in lay.block_slots()] == [(1, 3), (5, 2)]
    assert lay.block == [12, 1, 1, 1, 13, 1, 1]


def test_training_fill_pads_with_eos() -> None:
    lay = build_layout(SP, [100], [[200]], [4], answers=[[50, 51]])
    assert lay.block == [12, 50, 51, 2, 2]
    with pytest.raises(DecisionInputError) as err:
        build_layout(SP, [100], [[200]], [1], answers=[[50, 51]])
    assert err.value.field == "questions.0.answer"


def test_question_count_bounds() -> None:
    with pytest.raises(DecisionInputError):
        build_layout(SP, [100], [[1]] * 9, [1] * 9)
    with pytest.raises(DecisionInputError):
        build_layout(SP, [100], [], [])
