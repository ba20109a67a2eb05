"""benchmarks/number_skills.py: a small --groups that holds no row of a kind reports it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = str(Path(__file__).resolve().parents[1] / "benchmarks")


def test_no_rows_of_a_kind_is_reported_not_divided_by(
    load_benchmark: Callable[[str], ModuleType], capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(BENCHMARKS)  # the script imports its neighbour heldout.py
    monkeypatch.delitem(sys.modules, "heldout", raising=False)
    mod = load_benchmark("number_skills")
    # no rows: the model is never asked (None would fail if it were)
    mod._alone_vs_with_sources(None, [], 4, "days taken", "joint", "both days read right")
    out = capsys.readouterr().out
    assert "| days taken | correct |" in out
    assert "none in these groups | 0/0" in out
