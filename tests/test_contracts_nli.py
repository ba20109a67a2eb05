"""ContractNLI to batch-scoring groups: labels, grouping, files, and the real dev set."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from apps.contracts.contractnli import _chunks, load_groups, main, question_text, write_csv
from apps.contracts.csv_format import read_groups
from apps.xiangqi.dataset import data_dir
from decision.errors import DecisionInputError

REPO_ROOT = Path(__file__).resolve().parents[1]
DEV = data_dir(REPO_ROOT) / "contract-nli" / "dev.json"


def _fixture(tmp_path: Path) -> Path:
    labels = {f"nda-{i}": {"short_description": f"h{i}", "hypothesis": f"Hypothesis {i}."}
              for i in (1, 2, 10)}
    choice = lambda c: {"choice": c, "spans": []}  # noqa: E731
    documents = [
        {"id": 7, "text": "First agreement.", "annotation_sets": [{"annotations": {
            "nda-10": choice("NotMentioned"), "nda-2": choice("Contradiction"),
            "nda-1": choice("Entailment")}}]},
        {"id": 9, "text": "@Second agreement.", "annotation_sets": [{"annotations": {
            "nda-2": choice("Entailment")}}]},
    ]
    path = tmp_path / "nli.json"
    path.write_text(json.dumps({"documents": documents, "labels": labels}))
    return path


def test_chunks_are_balanced_and_bounded() -> None:
    assert [len(c) for c in _chunks(list(range(17)), 8)] == [6, 6, 5]
    assert [len(c) for c in _chunks(list(range(8)), 8)] == [8]
    assert _chunks([], 8) == []
    assert sum(_chunks(list(range(9)), 4), []) == list(range(9))
    # the larger chunks come first and sizes differ by at most one
    assert [len(c) for c in _chunks(list(range(9)), 4)] == [3, 3, 3]
    assert [len(c) for c in _chunks(list(range(10)), 4)] == [4, 3, 3]
    assert [len(c) for c in _chunks(list(range(23)), 8)] == [8, 8, 7]


def test_groups_carry_labels_in_hypothesis_order(tmp_path: Path) -> None:
    groups = load_groups(_fixture(tmp_path), per_group=2)
    assert [g.group_id for g in groups] == ["7-1", "7-2", "9-1"]
    first = groups[0].questions + groups[1].questions
    assert [q.id for q in first] == ["nda-1", "nda-2", "nda-10"]  # numeric, not string, order
    assert [q.gold for q in first] == ["entailed", "contradicted", "not mentioned"]
    assert first[0].text == question_text("Hypothesis 1.")
    assert groups[2].questions[0].gold == "entailed"


def test_csv_round_trips_through_the_scoring_reader(tmp_path: Path) -> None:
    out = tmp_path / "out" / "nli.csv"
    rows, documents = write_csv(load_groups(_fixture(tmp_path)), out)
    assert (rows, documents) == (4, 2)
    read = read_groups(out)
    assert [g.group_id for g in read] == ["7-1", "9-1"]
    assert read[0].document == "First agreement."
    assert read[1].document == "@Second agreement."  # a document file may start with "@"
    assert read[0].questions[1].answer == {
        "type": "choice", "options": ["entailed", "contradicted", "not mentioned"]}
    assert [q.gold for q in read[0].questions] == ["entailed", "contradicted", "not mentioned"]


def test_bad_input_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(DecisionInputError, match="not a ContractNLI JSON file"):
        load_groups(bad)
    with pytest.raises(DecisionInputError):
        load_groups(_fixture(tmp_path), per_group=9)
    assert main([str(bad), "--out", str(tmp_path / "x.csv")]) == 2
    assert "not a ContractNLI JSON file" in capsys.readouterr().err
    # labels as a list was a TypeError traceback; a label without its hypothesis was blamed on
    # the first document that annotates it
    for data, message in (({"documents": [], "labels": [{"hypothesis": "H."}]},
                           "'labels' is not an object"),
                          ({"documents": {"7": {}}, "labels": {}}, "'documents' is not a list"),
                          ({"documents": [], "labels": {"nda-1": "H."}},
                           "label 'nda-1' has no hypothesis text")):
        bad.write_text(json.dumps(data))
        assert main([str(bad), "--out", str(tmp_path / "x.csv")]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


@pytest.mark.skipif(not DEV.is_file(), reason=f"{DEV} not found (clone shared/ beside the repo)")
def test_real_dev_set_converts_completely() -> None:
    data = json.loads(DEV.read_text())
    groups = load_groups(DEV)
    assert len({g.document_id for g in groups}) == len(data["documents"]) == 61
    questions = [q for g in groups for q in g.questions]
    assert len(questions) == 1037
    assert all(1 <= len(g.questions) <= 8 for g in groups)
    expected = Counter(a["choice"] for d in data["documents"]
                       for a in d["annotation_sets"][0]["annotations"].values())
    got = Counter(q.gold for q in questions)
    assert got == {"entailed": expected["Entailment"], "contradicted": expected["Contradiction"],
                   "not mentioned": expected["NotMentioned"]}


def test_a_malformed_document_is_one_clear_error(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown label or a document without annotations: exit 2 naming the document."""
    labels = {"nda-1": {"hypothesis": "H1."}}
    cases = {
        "label": ({"id": 4, "text": "x", "annotation_sets": [{"annotations": {
            "nda-1": {"choice": "Entailed", "spans": []}}}]}, "label 'Entailed' of nda-1"),
        "annotations": ({"id": 5, "text": "x"}, "annotation_sets"),
        # an annotation of a hypothesis the labels lack was dropped without a word
        "unknown": ({"id": 6, "text": "x", "annotation_sets": [{"annotations": {
            "nda-1": {"choice": "Entailment", "spans": []},
            "nda-99": {"choice": "Entailment", "spans": []}}}]},
            "annotates nda-99, which the file's labels do not define"),
    }
    for name, (document, message) in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"documents": [document], "labels": labels}))
        with pytest.raises(DecisionInputError, match=message) as info:
            load_groups(path)
        assert info.value.field == f"documents[0] (id {document['id']})"
        assert main([str(path), "--out", str(tmp_path / "x.csv")]) == 2
        assert f"documents[0] (id {document['id']})" in capsys.readouterr().err


def test_unannotated_pairs_are_counted_and_an_unwritable_out_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _fixture(tmp_path)  # 2 agreements x 3 hypotheses, 4 of them annotated
    assert main([str(path), "--out", str(tmp_path / "out.csv")]) == 0
    assert "note: 2 of the 6 agreement-hypothesis pairs have no annotation" in (
        capsys.readouterr().err)
    (tmp_path / "a-folder.csv").mkdir()  # was an IsADirectoryError traceback
    assert main([str(path), "--out", str(tmp_path / "a-folder.csv")]) == 2
    assert "error: cannot write" in capsys.readouterr().err


def test_a_repeated_or_path_like_document_id_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each agreement is written once as docs/ID.txt: a repeated id wrote only the first text
    (the second agreement's questions then pointed at it, in groups of the same name, and the CSV
    did not read back), and an id with a path in it wrote outside docs/."""
    labels = {"nda-1": {"hypothesis": "H1."}}

    def document(doc_id: object, text: str) -> dict:
        return {"id": doc_id, "text": text, "annotation_sets": [{"annotations": {
            "nda-1": {"choice": "Entailment", "spans": []}}}]}

    cases = {
        "repeated": ([document(7, "First."), document(7, "Second.")], 1,
                     "the id repeats that of documents\\[0\\]"),
        "path": ([document("../escaped", "Outside.")], 0, "not a plain file name"),
    }
    for name, (documents, index, message) in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"documents": documents, "labels": labels}))
        with pytest.raises(DecisionInputError, match=message) as info:
            load_groups(path)
        assert info.value.field == f"documents[{index}] (id {documents[index]['id']})"
        out = tmp_path / name / "x.csv"
        assert main([str(path), "--out", str(out)]) == 2
        assert capsys.readouterr().err.count("\n") == 1
        assert not (tmp_path / name / "escaped.txt").exists() and not out.exists()


def test_json_nested_too_deeply_is_one_clear_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file of arrays nested 100,000 deep ended the converter with a RecursionError traceback
    (json.loads raises that, not ValueError); it is "not a ContractNLI JSON file", status 2."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert main([str(deep), "--out", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert "not a ContractNLI JSON file" in err and err.count("\n") == 1, err
