"""Evaluation statistics against hand-computed small cases and known interval values."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from decision.errors import DecisionInputError
from decision.metrics import (
    Z95,
    Record,
    accuracy_by_qtype,
    group_accuracy,
    independence_baseline,
    majority_baseline,
    paired_difference,
    paired_hits_difference,
    per_question_accuracy,
    summarize,
    wilson_interval,
)


def _records(spec: dict[str, list[tuple[str, bool]]], mode: str = "joint") -> list[Record]:
    return [Record(g, f"q{i}", ok, qtype, mode)
            for g, items in spec.items() for i, (qtype, ok) in enumerate(items, start=1)]


# g1: a right, b wrong; g2: a right, b right; g3: a wrong.
JOINT = _records({"g1": [("a", True), ("b", False)], "g2": [("a", True), ("b", True)],
                  "g3": [("a", False)]})
# the same questions answered standalone: g2's b is now wrong.
STANDALONE = _records({"g1": [("a", True), ("b", False)], "g2": [("a", True), ("b", False)],
                       "g3": [("a", False)]}, mode="standalone")


def test_wilson_known_values() -> None:
    low, high = wilson_interval(8, 10)  # the textbook 8/10 case: [0.4902, 0.9433]
    assert low == pytest.approx(0.49016, abs=1e-5) and high == pytest.approx(0.94332, abs=1e-5)
    low, high = wilson_interval(0, 10)  # upper bound z^2 / (n + z^2)
    z2 = 1.959963984540054 ** 2
    assert low == 0.0 and high == pytest.approx(z2 / (10 + z2))
    low, high = wilson_interval(10, 10)
    assert high == 1.0 and low == pytest.approx(10 / (10 + z2))
    with pytest.raises(DecisionInputError):
        wilson_interval(3, 0)


def test_per_question_accuracy_cluster_robust_se() -> None:
    est = per_question_accuracy(JOINT)
    # p = 3/5; group residual sums -0.2, 0.8, -0.6; V = 3/2 * (0.04 + 0.64 + 0.36) / 25
    assert est.value == pytest.approx(0.6) and est.n == 5
    assert est.se == pytest.approx(math.sqrt(1.5 * 1.04 / 25))
    assert est.low == pytest.approx(max(0.0, 0.6 - 1.959964 * est.se), abs=1e-6)
    assert est.high == pytest.approx(min(1.0, 0.6 + 1.959964 * est.se), abs=1e-6)


def test_singleton_groups_give_the_ordinary_binomial_se() -> None:
    oks = [True] * 7 + [False] * 3
    est = per_question_accuracy([Record(f"g{i}", "q", ok) for i, ok in enumerate(oks)])
    # G/(G-1) * sum (y - p)^2 / N^2 = p(1-p)/(N-1) when every group has one question
    assert est.se == pytest.approx(math.sqrt(0.7 * 0.3 / 9))
    one_group = per_question_accuracy([Record("g", "q1", True), Record("g", "q2", False)])
    assert math.isnan(one_group.se)


def test_group_accuracy_and_independence_baseline() -> None:
    est = group_accuracy(JOINT)
    assert est.value == pytest.approx(1 / 3) and est.n == 3
    assert (est.low, est.high) == pytest.approx(wilson_interval(1, 3))
    stats = accuracy_by_qtype(JOINT)
    assert stats["a"].accuracy == pytest.approx(2 / 3) and stats["a"].n == 3
    assert stats["b"].accuracy == pytest.approx(1 / 2) and stats["b"].n == 2
    # per group: g1 2/3*1/2, g2 2/3*1/2, g3 2/3; mean = 4/9
    assert independence_baseline(JOINT) == pytest.approx(4 / 9)


def test_independence_baseline_is_e_p_to_the_k_for_one_type() -> None:
    recs = _records({"g1": [("t", True)] * 2, "g2": [("t", False), ("t", True)],
                     "g3": [("t", True)]})
    p = 4 / 5
    assert independence_baseline(recs) == pytest.approx((p**2 + p**2 + p) / 3)


def test_majority_baseline_needs_gold() -> None:
    recs = [Record("g1", "q1", True, "a", gold="yes"), Record("g2", "q1", False, "a", gold="no"),
            Record("g3", "q1", True, "a", gold="yes"), Record("g1", "q2", True, "b", gold=3),
            Record("g2", "q2", True, "b", gold=True), Record("g3", "q2", True, "b", gold=1)]
    stats = accuracy_by_qtype(recs)
    assert stats["a"].majority == pytest.approx(2 / 3)
    assert stats["b"].majority == pytest.approx(1 / 3)  # True and 1 are different answers
    assert majority_baseline(recs) == pytest.approx(3 / 6)
    assert majority_baseline(JOINT) is None


def test_paired_difference_point_values_and_bootstrap() -> None:
    diff = paired_difference(JOINT, STANDALONE, n_boot=4000, seed=1)
    assert diff.question.value == pytest.approx(1 / 5) and diff.question.n == 5
    assert diff.group.value == pytest.approx(1 / 3) and diff.n_groups == 3
    assert diff.question.low <= diff.question.value <= diff.question.high
    assert diff.group.low == pytest.approx(0.0) and diff.group.high == pytest.approx(1.0)
    again = paired_difference(JOINT, STANDALONE, n_boot=4000, seed=1)
    assert again == diff


def test_bootstrap_interval_shrinks_with_more_groups_and_is_exact_when_constant() -> None:
    same = paired_difference(JOINT, JOINT, n_boot=200)
    assert (same.question.low, same.question.value, same.question.high) == (0.0, 0.0, 0.0)
    joint = [Record(f"g{i}", "q1", i % 2 == 0) for i in range(400)]
    alone = [Record(f"g{i}", "q1", i % 4 == 0, mode="standalone") for i in range(400)]
    diff = paired_difference(joint, alone, n_boot=2000, seed=0)
    assert diff.question.value == pytest.approx(0.25)
    # 100 of 400 groups differ by one: the binomial se is sqrt(.25 * .75 / 400) ~ 0.0217
    assert 0.03 < diff.question.value - diff.question.low < 0.055
    assert 0.03 < diff.question.high - diff.question.value < 0.055


def test_bad_input_is_refused() -> None:
    with pytest.raises(DecisionInputError):
        per_question_accuracy([])
    with pytest.raises(DecisionInputError):
        group_accuracy(JOINT + JOINT[:1])
    with pytest.raises(DecisionInputError):
        paired_difference(JOINT, STANDALONE[:-1])


def test_summarize_dict_and_markdown() -> None:
    result, table = summarize(JOINT + STANDALONE, n_boot=500, seed=3)
    assert list(result["modes"]) == ["joint", "standalone"]
    assert result["modes"]["joint"]["per_question"]["value"] == pytest.approx(0.6)
    assert result["modes"]["standalone"]["groups_fully_correct"]["value"] == pytest.approx(0.0)
    assert result["modes"]["joint"]["by_qtype"]["b"]["accuracy"] == pytest.approx(0.5)
    assert result["joint_minus_standalone"]["question"]["value"] == pytest.approx(0.2)
    lines = table.splitlines()
    assert lines[0].startswith("| mode | questions | per-question accuracy")
    assert any(ln.startswith("| joint | 5 | 60.0% [") for ln in lines)
    assert any(ln.startswith("| b | 50.0% | 0.0% | 2 |") for ln in lines)
    assert "Joint minus standalone on the same 5 questions / 3 groups" in table
    only_joint, table = summarize(JOINT)
    assert "joint_minus_standalone" not in only_joint and "Joint minus" not in table


@given(st.integers(min_value=1, max_value=500), st.data())
def test_wilson_contains_the_estimate_and_is_narrower_than_one(n: int, data: st.DataObject
                                                               ) -> None:
    k = data.draw(st.integers(min_value=0, max_value=n))
    low, high = wilson_interval(k, n)
    assert 0.0 <= low <= k / n <= high <= 1.0
    assert high - low < 1.0
    # symmetric: k successes and n - k failures mirror each other
    mirror = wilson_interval(n - k, n)
    assert mirror[0] == pytest.approx(1 - high, abs=1e-12)
    assert mirror[1] == pytest.approx(1 - low, abs=1e-12)


def test_paired_hits_count_discordant_items() -> None:
    a = [True, True, False, False, True, False, False, False, False, False]
    b = [True, False, True, True, True, True, False, False, False, False]
    d = paired_hits_difference(a, b)
    assert (d.b_only, d.a_only, d.n) == (3, 1, 10)
    assert (d.a_rate, d.b_rate) == (0.3, 0.5)
    assert d.difference == pytest.approx(0.2)
    se = math.sqrt(3 + 1 - (3 - 1) ** 2 / 10) / 10
    assert (d.low, d.high) == pytest.approx((0.2 - Z95 * se, 0.2 + Z95 * se))


@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=60))
def test_paired_hits_are_antisymmetric_and_zero_for_one_player(pairs: list[tuple[bool, bool]]
                                                               ) -> None:
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    ab, ba = paired_hits_difference(a, b), paired_hits_difference(b, a)
    assert ab.difference == pytest.approx(-ba.difference)
    assert (ab.low, ab.high) == pytest.approx((-ba.high, -ba.low))
    assert ab.low <= ab.difference <= ab.high
    same = paired_hits_difference(a, a)
    assert (same.difference, same.low, same.high) == (0.0, 0.0, 0.0)


def test_paired_hits_need_the_same_items() -> None:
    with pytest.raises(DecisionInputError, match="same items"):
        paired_hits_difference([True], [True, False])
