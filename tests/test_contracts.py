"""Generator of contract groups: determinism, coverage, balance, group shape, splits."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from apps.contracts import DEPENDS_ON, DERIVED, KINDS, SCHEMAS, generate_group, generate_groups
from apps.contracts.splits import SPLITS, TEST, TRAIN, VALIDATION, get_split, split_of
from decision.errors import DecisionInputError

N_SEEDS = 500


@pytest.fixture(scope="module")
def groups() -> dict[int, list]:
    return {level: [generate_group(s, level) for s in range(N_SEEDS)] for level in (1, 2)}


def test_same_seed_same_group() -> None:
    for seed in (0, 7, 123_456, 20_000_001):
        for level in (1, 2):
            assert generate_group(seed, level) == generate_group(seed, level)


def test_different_seeds_differ(groups: dict[int, list]) -> None:
    docs = [g.document for g in groups[2]]
    assert len(set(docs)) == len(docs)
    assert generate_group(5, 1) != generate_group(5, 2)


def test_generate_groups_matches_single_calls() -> None:
    assert list(generate_groups(40, 3, level=1)) == [generate_group(s, 1) for s in (40, 41, 42)]


def test_all_kinds_and_question_types_appear(groups: dict[int, list]) -> None:
    for level in (1, 2):
        kinds = Counter(g.kind for g in groups[level])
        assert set(kinds) == set(KINDS)
        assert min(kinds.values()) > N_SEEDS / 6
        qtypes = {q.qtype for g in groups[level] for q in g.questions}
        assert qtypes == set(SCHEMAS)
    assert len(SCHEMAS) >= 8
    assert {s["type"] for s in SCHEMAS.values()} == {"choice", "boolean", "integer"}


def test_group_shape_and_schemas(groups: dict[int, list]) -> None:
    sizes = Counter()
    for level in (1, 2):
        for g in groups[level]:
            assert 1 <= len(g.questions) <= 8
            sizes[len(g.questions)] += 1
            assert [q.id for q in g.questions] == [f"q{i}" for i in range(1, len(g.questions) + 1)]
            assert len({q.qtype for q in g.questions}) == len(g.questions)
            assert g.group_id == f"contracts-L{level}-{g.seed}"
            for q in g.questions:
                assert q.depends_on == DEPENDS_ON.get(q.qtype, ())
                assert q.text.endswith("?") and len(q.text) > 20
                kind = q.answer["type"]
                if kind == "choice":
                    assert q.gold in q.answer["options"] and "not stated" in q.answer["options"]
                elif kind == "boolean":
                    assert isinstance(q.gold, bool)
                else:
                    assert type(q.gold) is int
                    assert q.answer["minimum"] <= q.gold <= q.answer["maximum"]
    assert set(sizes) == set(range(1, 9))


def test_groups_favour_a_derived_question_with_its_inputs(groups: dict[int, list]) -> None:
    linked = 0
    for g in groups[2]:
        present = {q.qtype for q in g.questions}
        linked += any(set(q.depends_on) & present for q in g.questions)
    assert linked / N_SEEDS > 0.6


def test_derived_labels_are_balanced(groups: dict[int, list]) -> None:
    labels: dict[str, Counter] = defaultdict(Counter)
    for level in (1, 2):
        for g in groups[level]:
            for q in g.questions:
                if q.qtype in DERIVED:
                    value = q.gold
                    if type(value) is int:
                        value = "zero" if value == 0 else "positive"
                    labels[q.qtype][value] += 1
    for qtype, counts in labels.items():
        total = sum(counts.values())
        assert total >= 100, qtype
        if qtype == "last_on_time_day":  # a sum, never zero: its spread is checked below
            continue
        assert len(counts) >= 2, qtype
        assert max(counts.values()) / total <= 0.7, (qtype, counts)
        if SCHEMAS[qtype]["type"] == "choice":
            for option in ("yes", "no", "not stated"):
                assert counts[option] / total >= 0.15, (qtype, counts)
    days = Counter(q.gold for lv in (1, 2) for g in groups[lv] for q in g.questions
                   if q.qtype == "last_on_time_day")
    assert len(days) >= 10 and max(days.values()) / sum(days.values()) < 0.2


def test_document_lengths(groups: dict[int, list]) -> None:
    full = [len(g.document.split()) for g in groups[2]]
    short = [len(g.document.split()) for g in groups[1]]
    assert max(full) <= 300 and sum(w >= 80 for w in full) / len(full) > 0.97
    assert sum(short) / len(short) < 0.75 * sum(full) / len(full)


def test_dates_are_written_out(groups: dict[int, list]) -> None:
    import re

    pattern = re.compile(r"\b(January|February|March|April|May|June|July|August|September|"
                         r"October|November|December) [1-9]\d?, 20\d\d\b")
    with_dates = [g for g in groups[2] if pattern.search(g.document)]
    assert len(with_dates) > 0.9 * N_SEEDS
    assert not re.search(r"\b\d{4}-\d\d-\d\d\b|\b0\d, 20", "".join(g.document for g in groups[2]))


@pytest.mark.parametrize("seed,level", [(-1, 2), (1.5, 2), (True, 2), (3, 0), (3, 3), (3, "2")])
def test_bad_arguments_raise(seed: object, level: object) -> None:
    with pytest.raises(DecisionInputError):
        generate_group(seed, level)  # type: ignore[arg-type]


def test_splits_are_disjoint_and_named() -> None:
    ranges = sorted(SPLITS.values(), key=lambda s: s.start)
    for a, b in zip(ranges, ranges[1:], strict=False):
        assert a.stop <= b.start
    assert split_of(0) == "train" and split_of(TRAIN.stop - 1) == "train"
    assert split_of(VALIDATION.start) == "validation" and split_of(TEST.start) == "test"
    assert split_of(VALIDATION.stop) is None and split_of(TEST.stop) is None
    assert list(TEST.seeds(3, offset=2)) == [TEST.start + 2, TEST.start + 3, TEST.start + 4]
    assert get_split("validation") is VALIDATION
    with pytest.raises(DecisionInputError):
        get_split("dev")
    with pytest.raises(DecisionInputError):
        VALIDATION.seeds(len(VALIDATION) + 1)
