"""benchmarks/compare_evals.py: two checkpoints' eval records paired per mode, and refused when
they are not the same questions."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from types import ModuleType

import pytest

from decision.metrics import Record


@pytest.fixture
def mod(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("compare_evals")


def _records(shift: int, modes: tuple[str, ...] = ("joint", "standalone")) -> list[Record]:
    return [Record(f"g{g}", f"q{q}", (g * 5 + q + shift) % 4 > 0, f"t{q % 2}", mode,
                   gold=json.dumps(f"gold{q}"))
            for mode in modes for g in range(40) for q in range(5)]


def _write(path: Path, records: list[Record]) -> str:
    path.mkdir(parents=True, exist_ok=True)
    (path / "records.jsonl").write_text("".join(json.dumps(asdict(r)) + "\n" for r in records))
    return str(path)


def test_prints_the_paired_table_with_discordant_counts(
        mod: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _write(tmp_path / "a", _records(0)), _write(tmp_path / "b", _records(1))
    assert mod.main([a, b]) == 0
    out = capsys.readouterr().out
    assert "| joint | +0.0 [" in out and "(50 / 50)" in out
    assert "| question type | joint A | joint B | standalone A | standalone B | n |" in out
    same = mod.main([a, _write(tmp_path / "c", _records(0))])  # identical: not [+0.0, +0.0]
    assert same == 0
    out = capsys.readouterr().out
    assert "[+0.0, +0.0]" not in out and "(0 / 0, Newcombe)" in out


def test_other_gold_or_qtype_is_refused_naming_a_and_b(mod: ModuleType, tmp_path: Path) -> None:
    a = _write(tmp_path / "a", _records(0))
    gold = [replace(r, gold=json.dumps("other")) if r.question_id == "q1" else r
            for r in _records(1)]
    with pytest.raises(SystemExit, match=r"A \(.*a\) and B \(.*b\): 40 joint questions have a "
                                         r"different gold"):
        mod.main([a, _write(tmp_path / "b", gold)])
    qtype = [replace(r, qtype="x") if r.group_id == "g3" else r for r in _records(1)]
    with pytest.raises(SystemExit, match="different qtype"):
        mod.main([a, _write(tmp_path / "b2", qtype)])


def test_missing_question_or_mode_is_a_clean_error(mod: ModuleType, tmp_path: Path) -> None:
    a = _write(tmp_path / "a", _records(0))
    with pytest.raises(SystemExit, match=r"cover different joint questions: 1 only in A"):
        mod.main([a, _write(tmp_path / "b", _records(1)[1:])])
    with pytest.raises(SystemExit, match="A has standalone records and B has none"):
        mod.main([a, _write(tmp_path / "b2", _records(1, ("joint",)))])
    with pytest.raises(SystemExit, match=r"B \(.*nothing\): no records.jsonl"):
        mod.main([a, str(tmp_path / "nothing")])
    # both without standalone: the joint rows alone
    only = _write(tmp_path / "j", _records(0, ("joint",)))
    assert mod.main([only, _write(tmp_path / "j2", _records(1, ("joint",)))]) == 0
