"""``decision contracts demo``: two columns, timings and rule warnings in the terminal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from apps.contracts.demo import ModeRun, render
from apps.contracts.examples import get_example
from apps.contracts.presets import LEASE, check_rules
from decision.cli import main
from decision.serve.api import AnswerOut, DecideResponse

TRI = {"yes": 0.6, "no": 0.3, "not stated": 0.1}


def _run(mode: str, answers: dict[str, Any], steps: int, ms: float) -> ModeRun:
    out = [AnswerOut(id=k, value=v, text=str(v), confidence=0.75,
                     option_probabilities=TRI if isinstance(v, str) else None)
           for k, v in answers.items()]
    response = DecideResponse(model="stub", mode=mode, answers=out, steps=steps,
                              tokens_per_forward=2.0, timings={"total": ms})
    return ModeRun(mode, response, ms, check_rules(LEASE, answers))


def _rows(text: str) -> dict[str, str]:
    """Table rows by question id (the lines after the dashed rule)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("----")) + 1
    rows = {}
    for line in lines[start:]:
        if not line.strip():
            break
        if not line.startswith(" "):
            rows[line.split()[0]] = line
    return rows


def test_render_puts_the_modes_side_by_side_with_the_rule_warnings() -> None:
    example = get_example(1)  # lease: notice late (9 days of 10), deposit kept by the text
    good = {"required": 10, "given": 9, "timely": "no", "deposit": "yes", "renews": "no",
            "late": 0, "threshold": 3, "terminate": "not stated"}
    bad = {**good, "deposit": "no"}  # notice late, yet the deposit must be returned
    runs = [_run("joint", good, 3, 812.4), _run("standalone", bad, 8, 2051.0)]
    text = render(LEASE.requests(), runs, example.expected, probabilities=True)

    header = next(line for line in text.splitlines() if "standalone" in line and "joint" in line)
    assert header.index("joint") < header.index("standalone") < header.index("from the text")
    rows = _rows(text)
    assert list(rows) == [q.id for q in LEASE.questions]
    deposit = rows["deposit"]
    joint_cell = deposit[header.index("joint"):header.index("standalone")]
    alone_cell = deposit[header.index("standalone"):header.index("from the text")]
    assert joint_cell.split()[:2] == ["yes", "75%"] and "!" not in joint_cell
    assert alone_cell.split()[:2] == ["no", "75%"] and alone_cell.split()[2] == "*!"
    assert deposit.split()[-1] == "yes"  # what the text says
    assert "!" in rows["timely"][header.index("standalone"):]
    assert "not stated" in rows["threshold"]  # the text has no termination clause
    assert "joint: yes 60%, no 30%, not stated 10%" in text

    assert "joint:           812 ms  3 denoising steps, 2.0 tokens per forward" in text
    assert "standalone:     2051 ms  8 denoising steps" in text
    assert "answers that match the text: joint 7/7, standalone 6/7" in text
    assert "rule warnings (joint): none (7 rules kept)" in text
    assert "rule warnings (standalone): 1 rule broken" in text
    assert "  ! late-notice-outcome: A late notice means the Landlord may keep the deposit" in text
    assert "      timely = no, deposit = no" in text


def test_render_reports_rules_that_could_not_be_checked() -> None:
    runs = [_run(m, {"timely": "yes", "deposit": "no"}, 1, 5.0) for m in ("joint", "standalone")]
    text = render([q for q in LEASE.requests() if q["id"] in ("timely", "deposit")], runs)
    assert "from the text" not in text and "* differs" not in text
    assert "not checked: timely-by-days (not asked: given, required)" in text


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoint_dir: Path) -> Path:
    return tiny_checkpoint_dir


def test_the_command_runs_an_example_with_a_model(checkpoint: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["contracts", "demo", "--example", "7", "--model", str(checkpoint),
                   "--max-steps", "1"])
    out = capsys.readouterr().out
    assert status == 0
    assert out.startswith("NDA 1: return on time, report on time (validation seed 10000004, "
                          "preset nda)\nmodel: tiny-model\n")
    assert "CONFIDENTIALITY" in out.upper()  # the document is printed
    rows = _rows(out)
    assert list(rows) == ["return_deadline", "return_taken", "return_timely", "report_deadline",
                          "report_taken", "report_timely", "damages", "advisers"]
    for row in rows.values():
        assert row.count("%") == 2, row  # an answer with its confidence in each column
    for mode in ("joint", "standalone"):
        line = next(li for li in out.splitlines() if li.startswith(f"{mode}:"))
        assert " ms  " in line and "denoising step" in line
        assert f"rule warnings ({mode}):" in out
    assert "answers that match the text: joint " in out


def test_list_and_input_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["contracts", "demo", "--list"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert len(listing) == 9 and listing[0].startswith("  1  Lease 1:")
    assert main(["contracts", "demo", "--example", "12"]) == 2
    assert "error (example): example must be a number from 1 to 9" in capsys.readouterr().err
    assert main(["contracts", "demo", "--document", str(tmp_path / "none.txt")]) == 2
    assert "error (document): cannot read" in capsys.readouterr().err
    assert main(["contracts", "demo", "--max-steps", "0"]) == 2  # checked before loading a model
    assert "error: options.max_steps: " in capsys.readouterr().err  # the field named once


def test_a_document_the_engine_refuses_prints_only_the_error(
    checkpoint: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A blank or too long document printed the title and the document on stdout, then the
    error: the engine's refusal now comes before anything is printed."""
    blank = tmp_path / "blank.txt"
    blank.write_text("  \n")
    blank_with_bom = tmp_path / "bom.txt"  # an editor's byte-order mark is no text
    blank_with_bom.write_text("\ufeff  \n", encoding="utf-8")
    long = tmp_path / "long.txt"
    long.write_text("The Tenant gave notice. " * 3000)
    for document in (blank, blank_with_bom, long):
        assert main(["contracts", "demo", "--document", str(document), "--model",
                     str(checkpoint)]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.startswith("decision contracts: error (document): ")


def test_bad_options_are_refused_before_the_model_loads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from decision.serve.engine import ModelEngine

    def load(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(ModelEngine, "load", load)
    for flag, value in (("--max-steps", "0"), ("--threshold", "2")):
        assert main(["contracts", "demo", flag, value]) == 2
        err = capsys.readouterr().err
        assert err.startswith("decision contracts: error: options.") and err.count("\n") == 1


def test_preset_flag_wins_over_the_example_and_hide_document_hides_it(
    checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Example 7 is an NDA: ``--preset lease`` asks the lease questions of it instead."""
    status = main(["contracts", "demo", "--example", "7", "--preset", "lease", "--model",
                   str(checkpoint), "--max-steps", "1", "--hide-document"])
    out = capsys.readouterr().out
    assert status == 0
    assert out.startswith("NDA 1: return on time, report on time (validation seed 10000004, "
                          "preset lease)\nmodel: tiny-model\n\n")
    assert get_example(7).document.splitlines()[0] not in out  # the document is not printed
    assert list(_rows(out)) == [q["id"] for q in LEASE.requests()]
