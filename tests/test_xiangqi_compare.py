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


def _write(path: Path, rows: list[dict[str, object]]) -> str:
    path.write_text(json.dumps({"results": rows}))
    return str(path)


def test_different_seen_flags_are_refused_whichever_file_comes_first(
        mod: ModuleType, tmp_path: Path) -> None:
    a = _write(tmp_path / "a.json", _rows([True, False, True], [True, False, False]))
    b = _write(tmp_path / "b.json", _rows([True, True, False], [True, False, True]))
    for pair in ([a, b], [b, a]):  # "never in training" used to come from A's flags alone
        with pytest.raises(SystemExit, match=r"different positions.*\(ply, gold, seen\)"):
            mod.main(pair)


def test_keys_are_compared_when_both_files_have_them(mod: ModuleType, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    rows_a = [dict(r, key=1000 + i) for i, r in enumerate(_rows([True, False]))]
    rows_b = [dict(r, key=1000 + i) for i, r in enumerate(_rows([False, False]))]
    assert mod.main([_write(tmp_path / "a.json", rows_a), _write(tmp_path / "b.json", rows_b)]) == 0
    assert "all: n 2" in capsys.readouterr().out
    rows_b[1]["key"] = 7  # same ply and gold, another position
    with pytest.raises(SystemExit, match=r"\(key, ply, gold, seen\): position 1"):
        mod.main([str(tmp_path / "a.json"), _write(tmp_path / "b.json", rows_b)])
    # an old file without keys: compared by (ply, gold, seen)
    old = _write(tmp_path / "old.json", _rows([False, True]))
    assert mod.main([str(tmp_path / "a.json"), old]) == 0


def test_no_unseen_positions_print_no_positions(mod: ModuleType, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    a = _write(tmp_path / "a.json", _rows([True, False], [True, True]))
    b = _write(tmp_path / "b.json", _rows([True, True], [True, True]))
    assert mod.main([a, b]) == 0
    out = capsys.readouterr().out
    assert "never in training: no positions" in out and "[+0.0, +0.0]" not in out


def test_no_discordant_position_gives_an_interval_of_nonzero_width(
        mod: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hits = [i % 4 == 0 for i in range(400)]
    a = _write(tmp_path / "a.json", _rows(hits))
    b = _write(tmp_path / "b.json", _rows(hits))
    assert mod.main([a, b]) == 0
    out = capsys.readouterr().out
    assert "B - A +0.0 [-0.7, +0.7] points (B alone right 0, A alone right 0)" in out


def test_the_same_pair_or_sample_twice_is_refused(mod: ModuleType, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    a = _write(tmp_path / "a.json", _rows([True, False, True]))
    b = _write(tmp_path / "b.json", _rows([True, True, False]))
    with pytest.raises(SystemExit, match="same pair of files is given twice"):
        mod.main([a, b, a, b])
    c = _write(tmp_path / "c.json", _rows([True, True, True]))  # copies of the same sample
    d = _write(tmp_path / "d.json", _rows([False, True, True]))
    with pytest.raises(SystemExit, match="same positions as"):
        mod.main([a, b, c, d])
    assert capsys.readouterr().out == ""  # refused before anything is printed
