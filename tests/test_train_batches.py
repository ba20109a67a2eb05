"""Length-sorted batch windows: every row once, less padding, a pure function of the step."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decision.train.batches import StepBatches
from decision.train.rows import KIND_STANDALONE, Row, collate


def row_of_length(n: int, index: int) -> Row:
    return Row([index] * n, [0] * n, [1], [1], [0], [0], KIND_STANDALONE, {"index": index})


def lengths_source(seed: int):  # noqa: ANN201 - a row hook
    def rows(i: int) -> Row:
        return row_of_length(random.Random(seed * 1_000_003 + i).randint(1, 60), i)

    return rows


def indices(rows: list[Row]) -> list[int]:
    return [r.meta["index"] for r in rows]


def test_window_one_is_plain_row_order() -> None:
    batches = StepBatches(lengths_source(0), batch_size=4)
    assert indices(batches.rows_for(0)) == [0, 1, 2, 3]
    assert indices(batches.rows_for(5)) == [20, 21, 22, 23]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 6), st.integers(2, 6), st.integers(0, 3))
def test_a_window_uses_each_row_once_and_pads_less(seed: int, bs: int, window: int, w: int) -> None:
    rows = lengths_source(seed)
    sorted_batches = StepBatches(rows, bs, window, seed)
    plain = StepBatches(rows, bs)
    steps = range(w * window, (w + 1) * window)
    used = [i for s in steps for i in indices(sorted_batches.rows_for(s))]
    assert sorted(used) == list(range(w * window * bs, (w + 1) * window * bs))

    def padded(b: StepBatches) -> int:
        return sum(collate(b.rows_for(s), 0).history_ids.numel() for s in steps)

    assert padded(sorted_batches) <= padded(plain)


def test_a_step_batch_does_not_depend_on_what_ran_before() -> None:
    rows = lengths_source(3)
    walked = StepBatches(rows, 4, 8, seed=7)
    for s in range(20):
        walked.rows_for(s)
    fresh = StepBatches(rows, 4, 8, seed=7)
    assert indices(fresh.rows_for(19)) == indices(walked.rows_for(19))
    other = StepBatches(rows, 4, 8, seed=8)  # the seed reorders a window's batches
    assert [indices(other.rows_for(s)) for s in range(40)] != [
        indices(fresh.rows_for(s)) for s in range(40)
    ]


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        StepBatches(lengths_source(0), 0)
    with pytest.raises(ValueError):
        StepBatches(lengths_source(0), 4, window=0)


def test_the_step_benchmark_runs_and_sorted_windows_pad_less() -> None:
    """benchmarks/train_step.py on a few Xiangqi rows: one table row per variant."""
    import subprocess
    import sys
    from pathlib import Path

    from apps.xiangqi.train_player import XiangqiSection

    root = Path(__file__).resolve().parents[1]
    if not Path(XiangqiSection().train_games).is_file():
        pytest.skip("Xiangqi games not found (clone shared/ beside the repository)")
    out = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "train_step.py"), "--steps", "2", "--windows",
         "2", "--rounds", "1", "--games", "60", "--threads", "1", "--bf16"],
        capture_output=True, text=True, cwd=root, check=True, timeout=600,
    ).stdout
    rows = {line.split("|")[1].strip(): line.split("|")[2:5] for line in out.splitlines()
            if line.startswith("| ") and "---" not in line and "batches" not in line}
    assert set(rows) == {"plain order", "sorted windows of 2", "plain order, bf16 autocast"}
    assert int(rows["sorted windows of 2"][0]) <= int(rows["plain order"][0])
    assert float(rows["plain order"][2]) == 1.0
