"""The mixtures of benchmarks/xiangqi_option_mixtures.py: orders, means and the report."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import NamedTuple

import pytest

from decision.joint.scoring import ORDERS, order_positions


@pytest.fixture
def mixtures(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("xiangqi_option_mixtures")


def test_all_orders_are_the_24_permutations_with_the_default_pair_first(
        mixtures: ModuleType) -> None:
    orders = mixtures.all_orders()
    assert orders[:2] == list(ORDERS) and len(orders) == 24
    perms = {tuple(order_positions(order, 4)) for order in orders}
    assert len(perms) == 24 and all(sorted(p) == [0, 1, 2, 3] for p in perms)


def test_mixture_is_the_mean_and_top_moves_its_argmax(mixtures: ModuleType) -> None:
    a = [{"a0a1": 0.6, "b0c2": 0.4}, {"a0a1": 0.2, "b0c2": 0.8}]
    b = [{"a0a1": 0.2, "b0c2": 0.8}, {"a0a1": 0.4, "b0c2": 0.6}]
    mean = mixtures.mixture([a, b])
    assert mean[0] == pytest.approx({"a0a1": 0.4, "b0c2": 0.6})
    assert mixtures.top_moves(mean) == ["b0c2", "b0c2"]
    assert mixtures.top_moves(a) == ["a0a1", "b0c2"]


class _Example(NamedTuple):
    gold: str


class _Position(NamedTuple):
    example: _Example
    key: int


def test_variants_and_report_compare_with_the_shipped_pair(mixtures: ModuleType) -> None:
    # two positions, gold a0a1 then b0c2; the first model's pair gets only the first right
    right, wrong = {"a0a1": 0.9, "b0c2": 0.1}, {"a0a1": 0.1, "b0c2": 0.9}
    third = "positions:2,3,0,1"
    scores = {
        "m1": {"left_to_right": [right, right], "right_to_left": [right, right],
               third: [right, wrong]},
        "m2": {"left_to_right": [wrong, wrong], "right_to_left": [wrong, wrong]},
    }
    named = mixtures.variants(scores, [*ORDERS, third])
    assert list(named)[0].startswith("shipped")
    assert set(named) >= {f"order {third}", "all 3 orders", "model m2", "mean of 2 models"}
    sample = [_Position(_Example("a0a1"), 1), _Position(_Example("b0c2"), 2)]
    lines, rows = mixtures.report(sample, {1}, named)
    by_name = {row["variant"]: row for row in rows}
    assert by_name[f"order {third}"]["top1"] == 1.0 and by_name[f"order {third}"]["gained"] == 1
    assert by_name["model m2"]["top1"] == 0.5 and by_name["model m2"]["lost"] == 1
    assert by_name["mean of 2 models"]["top1"] == 0.5  # ties go to the first option listed
    assert by_name[list(named)[0]]["unseen_top1"] == 0.0  # position 2 unseen, missed
    assert lines[0] == "2 positions (1 unseen in training)"


def test_all_orders_and_model_means_average_every_part(mixtures: ModuleType) -> None:
    """"all N orders" is the mean over every order scored, the default pair included; "mean of
    N models" over every model's pair, the first included: leaving either out flips the move."""
    right, wrong = {"a0a1": 0.9, "b0c2": 0.1}, {"a0a1": 0.0, "b0c2": 1.0}
    slightly_wrong = {"a0a1": 0.4, "b0c2": 0.6}
    third = "positions:2,3,0,1"
    scores = {
        "m1": {"left_to_right": [right], "right_to_left": [right], third: [wrong]},
        "m2": {"left_to_right": [slightly_wrong], "right_to_left": [slightly_wrong]},
    }
    named = mixtures.variants(scores, [*ORDERS, third])
    assert mixtures.top_moves(named["all 3 orders"]) == ["a0a1"]  # (0.9 + 0.9 + 0) / 3 = 0.6
    assert named["all 3 orders"][0] == pytest.approx({"a0a1": 0.6, "b0c2": 0.4})
    assert mixtures.top_moves(named["mean of 2 models"]) == ["a0a1"]  # (0.9 + 0.4) / 2
    assert named["mean of 2 models"][0] == pytest.approx({"a0a1": 0.65, "b0c2": 0.35})
    _, rows = mixtures.report([_Position(_Example("a0a1"), 1)], set(), named)
    by_name = {row["variant"]: row for row in rows}
    assert by_name["all 3 orders"]["top1"] == by_name["mean of 2 models"]["top1"] == 1.0
    assert by_name[f"order {third}"]["lost"] == 1 and by_name["model m2"]["lost"] == 1


def test_top_moves_break_ties_by_the_first_option_listed(mixtures: ModuleType) -> None:
    """As the engine: of options of equal probability, the first in the map's order."""
    tied = [{"h2e2": 0.25, "b2e2": 0.25, "a0a1": 0.5}, {"b2e2": 0.5, "h2e2": 0.5},
            {"h2e2": 0.5, "b2e2": 0.5}]
    assert mixtures.top_moves(tied) == ["a0a1", "b2e2", "h2e2"]
