"""The contracts tools on wrong or odd input: one clear error (status 2), never a traceback, a
CSV the scoring reader refuses, or a check that passes what it should not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from apps.contracts import generate_group
from apps.contracts.checker import main as checker_main
from apps.contracts.contractnli import main as nli_main
from apps.contracts.csv_format import CsvGroup, CsvQuestion, read_groups, write_groups
from apps.contracts.presets import SERVICES, check_rules

# ---------------------------------------------------------------------- ContractNLI converter


def _doc(doc_id: Any, annotations: dict[str, str], text: str = "An agreement.") -> dict:
    return {"id": doc_id, "text": text, "annotation_sets": [{"annotations": {
        key: {"choice": choice, "spans": []} for key, choice in annotations.items()}}]}


def _refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict,
                         message: str) -> None:
    """Converting ``data`` exits 2 with one line of error holding ``message``."""
    status, err = _convert(tmp_path, capsys, json.dumps(data))
    assert status == 2 and message in err and err.count("\n") == 1, err


def _convert(tmp_path: Path, capsys: pytest.CaptureFixture[str], raw: str) -> tuple[int, str]:
    source = tmp_path / "in.json"
    source.write_text(raw, encoding="utf-8")
    out = tmp_path / "out" / "x.csv"
    status = nli_main([str(source), "--out", str(out)])
    err = capsys.readouterr().err
    if status == 0:  # what the converter wrote must read back
        read_groups(out)
    return status, err


LABELS = {"nda-1": {"hypothesis": "H1."}, "nda-2": {"hypothesis": "H2."}}


@pytest.mark.parametrize(("data", "message"), [
    # an empty agreement was written as an empty docs/ID.txt: the CSV then did not read back
    ({"labels": LABELS, "documents": [_doc(3, {"nda-1": "Entailment"}, text="")]},
     "documents[0] (id 3): the text is empty"),
    ({"labels": LABELS, "documents": [_doc(3, {"nda-1": "Entailment"}, text=" \n\t")]},
     "documents[0] (id 3): the text is empty"),
    # a hypothesis key becomes the question_id: empty, or with spaces the reader strips (two
    # keys then collide), it wrote a CSV the scoring reader refuses
    ({"labels": {"": {"hypothesis": "H."}}, "documents": [_doc(3, {"": "Entailment"})]},
     "label '' is not a usable question id"),
    ({"labels": {"nda-1": {"hypothesis": "H."}, "nda-1 ": {"hypothesis": "H'."}},
      "documents": [_doc(3, {"nda-1": "Entailment", "nda-1 ": "Contradiction"})]},
     "label 'nda-1 ' is not a usable question id"),
])
def test_contractnli_refuses_what_would_not_read_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict, message: str) -> None:
    _refused_in_one_line(tmp_path, capsys, data, message)
    assert not (tmp_path / "out" / "x.csv").exists()


@pytest.mark.parametrize(("data", "message"), [
    # no documents, or none with an annotation: exit 0 with a CSV of only its header, which
    # the scoring reader refuses
    ({"labels": LABELS, "documents": []}, "in.json: holds no documents"),
    ({"labels": {}, "documents": []}, "in.json: holds no documents"),
    ({"labels": LABELS, "documents": [_doc(3, {}), _doc(4, {})]},
     "in.json: no document annotates any hypothesis"),
    # an id of null, true or 1.5 was written as the agreement "None", "True" or "1.5"
    ({"labels": LABELS, "documents": [_doc(None, {"nda-1": "Entailment"})]},
     "in.json: documents[0] (id null): the id is not a string or an integer"),
    ({"labels": LABELS, "documents": [_doc(3, {"nda-1": "Entailment"}),
                                      _doc(True, {"nda-1": "Entailment"})]},
     "in.json: documents[1] (id true): the id is not a string or an integer"),
    ({"labels": LABELS, "documents": [_doc(1.5, {"nda-1": "Entailment"})]},
     "in.json: documents[0] (id 1.5): the id is not a string or an integer"),
    ({"labels": LABELS, "documents": [_doc({"a": 1}, {"nda-1": "Entailment"})]},
     'in.json: documents[0] (id {"a": 1}): the id is not a string or an integer'),
])
def test_contractnli_refuses_an_empty_file_or_an_id_of_another_type(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict, message: str) -> None:
    _refused_in_one_line(tmp_path, capsys, data, message)
    assert not (tmp_path / "out").exists()  # nothing written, not even docs/


def test_contractnli_takes_string_and_integer_ids(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = {"labels": LABELS, "documents": [_doc(3, {"nda-1": "Entailment"}),
                                            _doc("nda_4.b", {"nda-2": "NotMentioned"})]}
    status, err = _convert(tmp_path, capsys, json.dumps(data))
    assert status == 0, err
    assert [g.group_id for g in read_groups(tmp_path / "out" / "x.csv")] == ["3-1", "nda_4.b-1"]


@pytest.mark.parametrize(("data", "message"), [
    # JSON's "\ud800" escape is a lone surrogate, which UTF-8 cannot write: a
    # UnicodeEncodeError traceback that left a half-written CSV behind
    ({"labels": LABELS, "documents": [_doc(3, {"nda-1": "Entailment"}, text="A \ud800 B")]},
     "documents[0] (id 3): the text holds a lone surrogate"),
    ({"labels": {"nda-1": {"hypothesis": "H\ud800."}}, "documents": [_doc(3, {"nda-1":
                                                                           "Entailment"})]},
     "label 'nda-1': the hypothesis holds a lone surrogate"),
])
def test_contractnli_refuses_a_lone_surrogate_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict, message: str) -> None:
    _refused_in_one_line(tmp_path, capsys, data, message)
    assert not (tmp_path / "out" / "x.csv").exists()


def test_contractnli_label_key_of_many_digits_is_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Hypotheses are sorted by the number in their key: int() of over 4,300 digits raised."""
    huge = "nda-" + "9" * 5000
    data = {"labels": {**LABELS, huge: {"hypothesis": "H."}},
            "documents": [_doc(3, {"nda-2": "Contradiction", "nda-1": "Entailment",
                                   huge: "NotMentioned"})]}
    status, err = _convert(tmp_path, capsys, json.dumps(data))
    assert status == 0, err
    questions = read_groups(tmp_path / "out" / "x.csv")[0].questions
    assert [q.id for q in questions] == ["nda-1", "nda-2", huge]


def test_contractnli_refuses_a_key_given_twice(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A hypothesis annotated twice in one document kept the last label without a word."""
    raw = ('{"labels": {"nda-1": {"hypothesis": "H1."}}, "documents": [{"id": 3, "text": "A.", '
           '"annotation_sets": [{"annotations": {"nda-1": {"choice": "Entailment"}, '
           '"nda-1": {"choice": "Contradiction"}}}]}]}')
    status, err = _convert(tmp_path, capsys, raw)
    assert status == 2 and "'nda-1' appears twice in one object" in err, err
    assert err.count("\n") == 1


# ---------------------------------------------------------------------- checker CLI


def _late_fee_group() -> tuple[str, bool]:
    """A services document whose late-fee question the checker answers, and its answer."""
    from apps.contracts.checker import check

    for seed in range(200):
        group = generate_group(seed, 2)
        if group.kind != "services":
            continue
        try:
            qtype, value = check(group.document, "Does the Client owe at least one late fee?")
        except Exception:  # noqa: BLE001 - no late-fee clause in this document
            continue
        if qtype == "late_fee_due":
            return group.document, bool(value)
    raise AssertionError("no services document with a late-fee clause in 200 seeds")


@pytest.mark.parametrize(("answer", "as_gold"), [
    ({"type": "integer", "minimum": 0, "maximum": 1}, int),
    ({"type": "number"}, float),
])
def test_checker_does_not_take_a_number_for_a_yes_no_gold(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], answer: dict, as_gold: type) -> None:
    """A yes/no question whose gold cell is the number 0 or 1 agreed with the checker's False or
    True (Python's ``False == 0``): the check passed a gold of the wrong type."""
    document, value = _late_fee_group()
    group = CsvGroup("g1", document, [CsvQuestion(
        "q1", "Does the Client owe at least one late fee?", answer, as_gold(value))])
    path = tmp_path / "g.csv"
    write_groups([group], path)
    assert checker_main([str(path)]) == 1
    assert f"g1 q1: gold {as_gold(value)!r}, checker {value!r}" in capsys.readouterr().out


# ---------------------------------------------------------------------- /check rules


def test_equation_rule_reads_decimal_answers_without_rounding_noise() -> None:
    """A question retyped as ``number`` answers floats: 3 x 0.1 is 0.30000000000000004 in
    binary, and a consistent 0.3 was reported as a broken rule."""
    checks = {c.rule: c for c in check_rules(SERVICES, {"owed": 0.3, "late": 3, "fee": 0.1})}
    assert checks["total-fees"].status == "kept", checks["total-fees"].detail
    checks = {c.rule: c for c in check_rules(SERVICES, {"owed": 0.4, "late": 3, "fee": 0.1})}
    assert checks["total-fees"].status == "broken"
