"""Evaluation statistics against hand-computed small cases and known interval values."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
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


def _wilson_on(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """The Wilson interval written out for a possibly non-integer n (reference)."""
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def test_per_question_accuracy_cluster_robust_se() -> None:
    est = per_question_accuracy(JOINT)
    # p = 3/5; group residual sums -0.2, 0.8, -0.6; V = 3/2 * (0.04 + 0.64 + 0.36) / 25
    assert est.value == pytest.approx(0.6) and est.n == 5
    assert est.se == pytest.approx(math.sqrt(1.5 * 1.04 / 25))
    # Wilson on n_eff = p(1-p)/V (here 3.85, under N = 5)
    assert est.n_eff == pytest.approx(0.24 / est.se**2)
    assert (est.low, est.high) == pytest.approx(_wilson_on(0.6, 0.24 / est.se**2))
    assert est.few_groups


def test_per_question_interval_is_never_zero_width_at_the_ends() -> None:
    right = [Record(f"g{g}", f"q{i}", True) for g in range(20) for i in range(5)]
    est = per_question_accuracy(right)
    assert (est.value, est.se, est.n_eff) == (1.0, 0.0, 100)
    assert est.high == 1.0 and est.low == pytest.approx(100 / (100 + Z95**2))  # Wilson 100/100
    wrong = per_question_accuracy([Record(r.group_id, r.question_id, False) for r in right])
    assert wrong.low == 0.0 and wrong.high == pytest.approx(Z95**2 / (100 + Z95**2))
    # one wrong of 100: the normal interval reached 1.0; Wilson stays below it
    one = per_question_accuracy([Record(r.group_id, r.question_id, i > 0)
                                 for i, r in enumerate(right)])
    assert one.low < 0.99 < one.high < 1.0


def test_per_question_interval_matches_the_normal_one_with_many_groups() -> None:
    # 500 groups of 5, p far from 0 and 1: within 0.1 points of p +- 1.96 se (the old interval)
    import numpy as np

    rng = np.random.default_rng(0)
    for mu in (0.3, 0.5, 0.7):
        pg = rng.beta(4 * mu, 4 * (1 - mu), size=500)
        recs = [Record(f"g{g}", f"q{i}", bool(rng.random() < pg[g]))
                for g in range(500) for i in range(5)]
        est = per_question_accuracy(recs)
        assert not est.few_groups and est.n_eff < est.n  # clustered: design effect above 1
        assert est.low == pytest.approx(est.value - Z95 * est.se, abs=0.001)
        assert est.high == pytest.approx(est.value + Z95 * est.se, abs=0.001)


def test_few_groups_are_noted_in_the_summary() -> None:
    _, table = summarize(JOINT)
    assert "rest on 3 groups (fewer than 30)" in table
    many = [Record(f"g{g}", "q1", g % 3 > 0) for g in range(40)]
    result, table = summarize(many)
    assert not result["modes"]["joint"]["per_question"]["few_groups"]
    assert "fewer than 30" not in table


def test_one_group_is_noted_as_no_interval_not_a_narrow_one() -> None:
    """With one group the per-question interval is not computed (shown as -), yet the note
    said it rested on "1 groups" and was "optimistic (too narrow)"."""
    _, table = summarize([Record("g", "q1", True), Record("g", "q2", False)])
    assert "1 groups" not in table and "too narrow" not in table
    assert "one group: no per-question interval" in table


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
    # one question and one group differ: too few for the bootstrap, Newcombe on 5 questions / 3
    # groups (standalone = A, joint = B)
    assert diff.question_discordant == (1, 0) and diff.group_discordant == (1, 0)
    assert (diff.question.low, diff.question.high) == pytest.approx(
        _newcombe10_by_hand(2, 0, 1, 2))
    assert (diff.group.low, diff.group.high) == pytest.approx(_newcombe10_by_hand(0, 0, 1, 2))
    again = paired_difference(JOINT, STANDALONE, n_boot=4000, seed=1)
    assert again == diff


def test_paired_difference_without_discordant_items_is_not_zero_width() -> None:
    same = paired_difference(JOINT, JOINT, n_boot=200)
    assert same.question.value == 0.0 and same.question_discordant == (0, 0)
    assert same.question.low < 0.0 < same.question.high  # was [0, 0]
    assert same.group.low < 0.0 < same.group.high and same.group_discordant == (0, 0)
    assert same.question_method == same.group_method == "newcombe"
    # 500 groups, 3 questions differ: Newcombe on the questions, not the bootstrap's few draws
    joint = [Record(f"g{i}", "q1", i % 5 > 0) for i in range(500)]
    alone = [Record(f"g{i}", "q1", i % 5 > 0 or i < 15 and i % 5 == 0, mode="standalone")
             for i in range(500)]
    few = paired_difference(joint, alone, n_boot=500)
    assert few.question_discordant == (0, 3) and few.question_method == "newcombe"
    assert few.question.low < -0.006 < 0.0 < few.question.high
    _, table = summarize(joint + alone, n_boot=200)
    assert "right only joint 0, only standalone 3" in table and "Newcombe" in table


def test_paired_difference_counts_the_groups_the_bootstrap_draws_from() -> None:
    # 12 questions differ, all in 4 of 200 groups: the bootstrap resamples groups, so it has 4
    # draws that carry a difference, too few, however many questions they hold (was bootstrap)
    joint = [Record(f"g{i}", f"q{k}", True) for i in range(200) for k in range(3)]
    alone = [Record(f"g{i}", f"q{k}", i >= 4, mode="standalone")
             for i in range(200) for k in range(3)]
    clustered = paired_difference(joint, alone, n_boot=500)
    assert clustered.question_discordant == (12, 0)
    assert clustered.question_method == clustered.group_method == "newcombe"
    # the same 12 differences spread over 12 groups: enough groups for the bootstrap
    alone = [Record(f"g{i}", f"q{k}", not (i < 12 and k == 0), mode="standalone")
             for i in range(200) for k in range(3)]
    spread = paired_difference(joint, alone, n_boot=500)
    assert spread.question_discordant == (12, 0)
    assert spread.question_method == spread.group_method == "bootstrap"


def test_bootstrap_interval_shrinks_with_more_groups() -> None:
    joint = [Record(f"g{i}", "q1", i % 2 == 0) for i in range(400)]
    alone = [Record(f"g{i}", "q1", i % 4 == 0, mode="standalone") for i in range(400)]
    diff = paired_difference(joint, alone, n_boot=2000, seed=0)
    assert diff.question.value == pytest.approx(0.25) and diff.question_method == "bootstrap"
    assert diff.question_discordant == (100, 0) and diff.group_discordant == (100, 0)
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


def _newcombe10_by_hand(both: int, a_only: int, b_only: int, neither: int
                        ) -> tuple[float, float]:
    """Newcombe (1998) method 10 for B - A: Wilson limits of each rate, phi with the
    continuity correction n/2 when ad > bc (reference for the tests)."""
    n = both + a_only + b_only + neither
    pb, pa = (both + b_only) / n, (both + a_only) / n
    lb, ub = _wilson_on(pb, n)
    la, ua = _wilson_on(pa, n)
    ad_bc = both * neither - a_only * b_only
    margins = (both + a_only) * (b_only + neither) * (both + b_only) * (a_only + neither)
    phi = 0.0 if margins == 0 else (max(ad_bc - n / 2, 0.0) if ad_bc > 0 else ad_bc) / math.sqrt(
        margins)
    low = pb - pa - math.sqrt((pb - lb) ** 2 - 2 * phi * (pb - lb) * (ua - pa) + (ua - pa) ** 2)
    high = pb - pa + math.sqrt((ub - pb) ** 2 - 2 * phi * (ub - pb) * (pa - la) + (pa - la) ** 2)
    return low, high


def test_paired_hits_count_discordant_items() -> None:
    a = [True, True, False, False, True, False, False, False, False, False]
    b = [True, False, True, True, True, True, False, False, False, False]
    d = paired_hits_difference(a, b)
    assert (d.b_only, d.a_only, d.n) == (3, 1, 10)
    assert (d.a_rate, d.b_rate) == (0.3, 0.5)
    assert d.difference == pytest.approx(0.2)
    # 4 discordant items (< 20): Newcombe's method 10, not the Wald interval
    assert (d.low, d.high) == pytest.approx(_newcombe10_by_hand(2, 1, 3, 4))


@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=60))
def test_paired_hits_are_antisymmetric_and_zero_for_one_player(pairs: list[tuple[bool, bool]]
                                                               ) -> None:
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    ab, ba = paired_hits_difference(a, b), paired_hits_difference(b, a)
    assert ab.difference == pytest.approx(-ba.difference)
    if not pairs:
        assert math.isnan(ab.low) and math.isnan(ab.high)
        return
    assert (ab.low, ab.high) == pytest.approx((-ba.high, -ba.low))
    assert ab.low <= ab.difference <= ab.high
    assert -1.0 <= ab.low < ab.high <= 1.0  # never of zero width
    same = paired_hits_difference(a, a)
    assert same.difference == 0.0 and same.low < 0.0 < same.high


def test_paired_hits_with_few_discordant_items_use_newcombe() -> None:
    # no discordant item in 2000: the Wald interval was [0, 0]
    a = [True] * 500 + [False] * 1500
    none = paired_hits_difference(a, a)
    assert (none.b_only, none.a_only) == (0, 0)
    assert none.low == pytest.approx(-0.00137, abs=1e-5) and none.high == pytest.approx(0.00137,
                                                                                      abs=1e-5)
    # 36 both / 12 only A / 2 only B / 0 neither (n = 50): B - A = -0.2, written out by hand
    a = [True] * 48 + [False] * 2
    b = [True] * 36 + [False] * 12 + [True] * 2
    d = paired_hits_difference(a, b)
    assert (d.b_only, d.a_only) == (2, 12) and d.difference == pytest.approx(-0.2)
    assert (d.low, d.high) == pytest.approx(_newcombe10_by_hand(36, 12, 2, 0))
    assert d.low == pytest.approx(-0.3404, abs=1e-4) and d.high == pytest.approx(-0.0569,
                                                                                abs=1e-4)


def test_paired_hits_keep_the_wald_interval_with_20_discordant_items() -> None:
    a = [True] * 300 + [False] * 12 + [True] * 8 + [False] * 1680
    b = [True] * 300 + [True] * 12 + [False] * 8 + [False] * 1680
    d = paired_hits_difference(a, b)
    se = math.sqrt(20 - 4**2 / 2000) / 2000
    assert (d.low, d.high) == pytest.approx((0.002 - Z95 * se, 0.002 + Z95 * se))


def test_paired_hits_need_the_same_items() -> None:
    with pytest.raises(DecisionInputError, match="same items"):
        paired_hits_difference([True], [True, False])


def _table(both: int, a_only: int, b_only: int, neither: int, times: int = 1
           ) -> tuple[list[bool], list[bool]]:
    """Hits of A and B on items with the given 2x2 counts (each repeated ``times``)."""
    a = ([True] * both + [True] * a_only + [False] * b_only + [False] * neither) * times
    b = ([True] * both + [False] * a_only + [True] * b_only + [False] * neither) * times
    return a, b


def test_paired_hits_near_plus_or_minus_one_stay_inside_and_keep_their_width() -> None:
    # every one of 20 items right only for B: the Wald interval was [1, 1] (se = 0)
    d = paired_hits_difference(*_table(0, 0, 20, 0))
    assert d.difference == 1.0 and d.low < 1.0 and d.high == 1.0
    assert (d.low, d.high) == pytest.approx(_newcombe10_by_hand(0, 0, 20, 0))
    # 29 of 30 right only for A: the Wald interval's low end was -1.031
    d = paired_hits_difference(*_table(1, 29, 0, 0))
    assert -1.0 <= d.low < d.difference < d.high
    assert (d.low, d.high) == pytest.approx(_newcombe10_by_hand(1, 29, 0, 0))
    # 99 of 100 right only for B: Wald's high end was 1.0095
    d = paired_hits_difference(*_table(0, 0, 99, 1))
    assert d.low < d.difference < d.high <= 1.0


_CELL = st.one_of(st.integers(0, 2), st.integers(0, 60))  # empty or tiny cells often


@given(_CELL, _CELL, _CELL, _CELL)
@example(0, 0, 20, 0)  # all discordant one way: the Wald interval was [1, 1]
@example(1, 29, 0, 0)  # the Wald interval went below -1
def test_paired_hits_tables_give_a_proper_interval_that_shrinks_with_n(
        both: int, a_only: int, b_only: int, neither: int) -> None:
    if both + a_only + b_only + neither == 0:
        return
    one = paired_hits_difference(*_table(both, a_only, b_only, neither))
    assert -1.0 <= one.low <= one.difference <= one.high <= 1.0 and one.low < one.high
    swapped = paired_hits_difference(*_table(both, b_only, a_only, neither))
    assert (swapped.low, swapped.high) == pytest.approx((-one.high, -one.low))
    two = paired_hits_difference(*_table(both, a_only, b_only, neither, times=2))
    assert two.difference == pytest.approx(one.difference)
    assert two.high - two.low <= one.high - one.low + 1e-12  # twice the items: no wider


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=4),
                min_size=2, max_size=25), st.integers(0, 3))
def test_paired_difference_flips_sign_when_joint_and_standalone_swap(
        groups: list[list[tuple[bool, bool]]], seed: int) -> None:
    def side(first: bool, mode: str) -> list[Record]:
        return [Record(f"g{g:02d}", f"q{q}", pair[0] if first else pair[1], mode=mode)
                for g, rows in enumerate(groups) for q, pair in enumerate(rows)]

    ab = paired_difference(side(True, "joint"), side(False, "standalone"), n_boot=100, seed=seed)
    ba = paired_difference(side(False, "joint"), side(True, "standalone"), n_boot=100, seed=seed)
    for x, y in ((ab.question, ba.question), (ab.group, ba.group)):
        assert x.value == pytest.approx(-y.value)
        assert (x.low, x.high) == pytest.approx((-y.high, -y.low))
        assert x.low <= x.value + 1e-12 and x.value <= x.high + 1e-12
    assert ab.question_discordant == ba.question_discordant[::-1]
    assert ab.group_discordant == ba.group_discordant[::-1]
    assert (ab.question_method, ab.group_method) == (ba.question_method, ba.group_method)


def test_per_question_effective_size_is_capped_at_the_question_count() -> None:
    """Groups that each hold one right and one wrong answer vary less than independent answers
    would: p(1-p)/se^2 comes out above N, and an interval on it would claim more precision than
    N independent questions give. n_eff is capped at N (here 66 -> 24)."""
    spec = {f"g{i}": [("a", True), ("a", False)] for i in range(10)}
    spec |= {"right": [("a", True), ("a", True)], "wrong": [("a", False), ("a", False)]}
    est = per_question_accuracy(_records(spec))
    assert est.value == 0.5 and est.n == 24
    assert 0.5 * 0.5 / est.se**2 > 60  # uncapped, it would be about 66
    assert est.n_eff == 24
    assert (est.low, est.high) == pytest.approx(wilson_interval(12, 24))
