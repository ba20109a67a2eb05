"""benchmarks/compare_xiangqi_agreement.py: the paired difference of two players' agreement."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture
def mod(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("compare_xiangqi_agreement")


def _rows(hits: list[bool], seen: list[bool] | None = None) -> list[dict[str, object]]:
    seen = seen or [False] * len(hits)
    return [{"ply": i, "gold": f"m{i}", "move": "x", "hit": h, "seen": s}
            for i, (h, s) in enumerate(zip(hits, seen, strict=True))]


def test_paired_difference_counts_discordant_positions(mod: ModuleType) -> None:
    a = _rows([True, True, False, False, True, False, False, False, False, False])
    b = _rows([True, False, True, True, True, True, False, False, False, False])
    d = mod.paired_top1_difference(a, b)
    assert (d["b_only"], d["a_only"]) == (3, 1)
    assert d["a_top1"] == 0.3 and d["b_top1"] == 0.5
    assert d["difference"] == pytest.approx(0.2)
    se = math.sqrt(3 + 1 - (3 - 1) ** 2 / 10) / 10
    assert d["ci95"] == pytest.approx((0.2 - mod.Z95 * se, 0.2 + mod.Z95 * se))


def test_identical_players_differ_by_nothing(mod: ModuleType) -> None:
    a = _rows([True, False, True])
    d = mod.paired_top1_difference(a, a)
    assert d["difference"] == 0.0 and d["ci95"] == (0.0, 0.0)


def test_files_of_different_positions_are_refused(mod: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps({"results": _rows([True, False])}))
    other = _rows([True, False])
    other[1]["gold"] = "elsewhere"
    (tmp_path / "b.json").write_text(json.dumps({"results": other}))
    with pytest.raises(SystemExit, match="different positions"):
        mod.main([str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    (tmp_path / "c.json").write_text(json.dumps({"top1": 0.1}))
    with pytest.raises(SystemExit, match="no per-position results"):
        mod.main([str(tmp_path / "a.json"), str(tmp_path / "c.json")])


def test_prints_all_and_unseen(mod: ModuleType, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.json").write_text(json.dumps({"results": _rows([True, False, False],
                                                                  [True, False, False])}))
    (tmp_path / "b.json").write_text(json.dumps({"results": _rows([True, True, False],
                                                                  [True, False, False])}))
    assert mod.main([str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    assert "all: n 3" in out and "never in training: n 2" in out
    assert "B alone right 1, A alone right 0" in out
