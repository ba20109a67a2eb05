"""benchmarks/compare_xiangqi_agreement.py: the paired difference of two players' agreement."""

from __future__ import annotations

import json
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


def test_pairs_are_printed_and_pooled(mod: ModuleType, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    files = {"a1": [True, False, False], "b1": [True, True, False], "a2": [True, True],
             "b2": [False, True]}
    for name, hits in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps({"results": _rows(hits)}))
    paths = [str(tmp_path / f"{name}.json") for name in files]
    assert mod.main(paths) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "a1.json -> b1.json" and out[3] == "a2.json -> b2.json"
    assert out[6] == "pooled"
    assert "all: n 5" in out[7] and "B - A +0.0" in out[7]  # +1 and -1 pooled
    assert "B alone right 1, A alone right 1" in out[7]
    with pytest.raises(SystemExit):
        mod.main(paths[:3])  # not in pairs
