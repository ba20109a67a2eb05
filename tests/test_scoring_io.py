"""Scoring CSV input (malformed rows by line number, @documents) and the predictions file
(incremental groups, recovery after an interruption)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from decision.errors import DecisionInputError
from decision.scoring.groups import INPUT_COLUMNS, read_groups
from decision.scoring.output import (
    OUTPUT_COLUMNS,
    PredictionRow,
    PredictionWriter,
    read_predictions,
    recover,
)
from decision.scoring.summary import summary_paths

CHOICE = json.dumps(["yes", "no", "not stated"])


def _csv(rows: list[list[str]], header: tuple[str, ...] = INPUT_COLUMNS) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def test_groups_in_order_with_at_documents_and_typed_gold(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "lease.txt").write_text("Lease text.\nSecond line.", encoding="utf-8")
    text = _csv([
        ["g2", "Doc two", "a", "Timely?", "boolean", "", "true"],
        ["g1", "@docs/lease.txt", "x", "Which?", "choice", CHOICE, "not stated"],
        ["g2", "", "b", "Days?", "integer", '{"minimum": 0, "maximum": 90}', "30"],
        ["g1", "@docs/lease.txt", "y", "Ok?", "boolean", "", ""],
    ])
    path = tmp_path / "in.csv"
    path.write_text(text, encoding="utf-8")
    groups, problems = read_groups(path)
    assert problems == []
    assert [g.group_id for g in groups] == ["g2", "g1"]
    g2, g1 = groups
    assert g1.document == "Lease text.\nSecond line."
    assert [q.question.id for q in g2.questions] == ["a", "b"]
    assert [q.gold for q in g2.questions] == [True, 30]
    assert g1.questions[1].gold is None and g1.questions[1].gold_text is None
    assert [q.line for q in g2.questions] == [2, 4]


MALFORMED = [
    (["g", "D", "q1", "Q", "color", "", ""], "color"),  # unknown answer type
    (["g", "D", "q1", "Q", "choice", "[not json", ""], "not JSON"),
    (["g", "D", "q1", "Q", "choice", "[]", ""], "non-empty JSON list"),  # empty options
    (["g", "D", "q1", "Q", "choice", '["a", "a"]', ""], "distinct"),
    (["g", "D", "q1", "Q", "choice", '{"a": 1}', ""], "JSON list"),
    (["g", "D", "q1", "Q", "boolean", "", "maybe"], "does not fit"),
    (["g", "D", "q1", "Q", "pattern", '{"regex": "[a-"}', ""], "regex"),
    (["g", "D", "q1", "Q", "integer", '{"minimum": 0, "maximum": 9}', "12"], "outside"),
    (["g", "D", "q1", "Q", "integer", '{"minimum": 5, "maximum": 1}', ""], "above maximum"),
    # were read as 10 (then gold 5 > "10" crashed the read with a TypeError) and as 1
    (["g", "D", "q1", "Q", "integer", '{"minimum": 0, "maximum": "10"}', "5"],
     'maximum must be a JSON integer such as 10, not "10"'),
    (["g", "D", "q1", "Q", "integer", '{"minimum": 0, "maximum": true}', ""],
     "maximum must be a JSON integer such as 10, not true"),
    (["g", "D", "q1", "Q", "pattern", '{"regex": "a+", "max_tokens": "4"}', ""],
     'max_tokens must be a JSON integer such as 10, not "4"'),
    (["", "D", "q1", "Q", "boolean", "", ""], "group_id is empty"),
    (["g", "D", "", "Q", "boolean", "", ""], "id"),
    (["g", "D", "q1", "", "boolean", "", ""], "text"),
    (["g", "D", "q1", "Q", "json", '{"schema": {"type": "object", "patternProperties": {}}}',
      ""], "not enforced"),
    (["g", "@missing.txt", "q1", "Q", "boolean", "", ""], "cannot read document file"),
    (["g", "D", "q1", "Q", "boolean", "", "", "extra"], "8 cells"),
    (["g", "", "q1", "Q", "boolean", "", ""], "must carry the document"),
    # golds the model could never give: they were kept and every such row scored wrong
    (["g", "D", "q1", "Q", "pattern", '{"regex": "[0-9]{1,3}"}', "twelve"],
     "does not fit the pattern answer's schema"),
    (["g", "D", "q1", "Q", "integer", "{}", "5000000000"],  # the default bounds, +-999,999,999
     "does not fit the integer answer's schema"),
    (["g", "D", "q1", "Q", "json", '{"schema": {"type": "integer"}}', '"300"'],
     "does not fit the json answer's schema"),
    # JSON and integers Python refuses to read were tracebacks that ended the run
    (["g", "D", "q1", "Q", "integer", '{"maximum": 1' + "0" * 5000 + "}", ""],
     "more than 4,300 digits"),
    (["g", "D", "q1", "Q", "integer", "", "9" * 5000], "does not fit"),
    (["g", "D", "q1", "Q", "json", "[" * 100_000, ""], "nested too deep"),
]


@pytest.mark.parametrize(("row", "reason"), MALFORMED, ids=[r for _, r in MALFORMED])
def test_malformed_row_is_skipped_with_its_line_or_stops_when_strict(
    tmp_path: Path, row: list[str], reason: str
) -> None:
    good = ["ok", "A document", "q1", "Fine?", "boolean", "", "false"]
    # a quoted multi-line document before the bad row: line numbers count physical lines
    multi = ["m", "line one\nline two\nline three", "q1", "Q?", "boolean", "", ""]
    path = tmp_path / "in.csv"
    path.write_text(_csv([good, multi, row, good[:2] + ["q2"] + good[3:]]), encoding="utf-8")
    groups, problems = read_groups(path)
    assert len(problems) == 1
    assert problems[0].line == 6  # header 1, good 2, multi 3-5, bad row 6
    assert reason in problems[0].reason
    # the line is said once, by the reader (the CLI prints "in.csv:6: skipped: <reason>")
    assert "line" not in problems[0].reason and not problems[0].reason.startswith("gold:")
    assert [g.group_id for g in groups] == ["ok", "m"]
    assert len(groups[0].questions) == 2  # the good row after the bad one is kept
    with pytest.raises(DecisionInputError, match=r"in\.csv:6: "):
        read_groups(path, strict=True)


def test_at_at_escapes_a_literal_document(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text(_csv([["g", "@@home", "q", "Q", "boolean", "", "TRUE"]]), encoding="utf-8")
    groups, problems = read_groups(path)
    assert problems == [] and groups[0].document == "@home"
    assert groups[0].questions[0].gold is True


def test_a_document_file_that_is_not_utf8_is_a_row_problem(tmp_path: Path) -> None:
    # used to end the run with a UnicodeDecodeError traceback
    (tmp_path / "latin1.txt").write_bytes("Caf\u00e9 lease".encode("latin-1"))
    path = tmp_path / "in.csv"
    path.write_text(_csv([["g", "@latin1.txt", "q1", "Q", "boolean", "", ""],
                          ["h", "Doc", "q1", "Q", "boolean", "", ""]]), encoding="utf-8")
    groups, problems = read_groups(path)
    assert [(p.line, p.group_id) for p in problems] == [(2, "g")]
    assert "cannot read document file 'latin1.txt'" in problems[0].reason
    assert "not UTF-8" in problems[0].reason
    assert [g.group_id for g in groups] == ["h"]
    with pytest.raises(DecisionInputError, match=r"in\.csv:2: cannot read document file"):
        read_groups(path, strict=True)


def test_group_level_row_problems(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text(_csv([
        ["g", "Doc", "q1", "Q", "boolean", "", ""],
        ["g", "Doc", "q1", "Again", "boolean", "", ""],
        ["g", "Other doc", "q2", "Q", "boolean", "", ""],
    ]), encoding="utf-8")
    groups, problems = read_groups(path)
    assert [(p.line, p.group_id) for p in problems] == [(3, "g"), (4, "g")]
    assert "duplicate question_id" in problems[0].reason
    assert "differs" in problems[1].reason
    assert len(groups[0].questions) == 1


def test_bad_header_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_text("group_id,document,question\n", encoding="utf-8")
    with pytest.raises(DecisionInputError, match="header lacks"):
        read_groups(path)
    with pytest.raises(DecisionInputError, match="cannot open"):
        read_groups(tmp_path / "absent.csv")
    # gold is optional: a header without it is accepted
    path.write_text(_csv([["g", "D", "q", "Q", "boolean", "", ""]], INPUT_COLUMNS[:-1])
                    .replace(",\n", "\n"), encoding="utf-8")
    groups, problems = read_groups(path)
    assert problems == [] and groups[0].questions[0].gold is None


def _row(group: str, qid: str, mode: str = "joint") -> PredictionRow:
    return PredictionRow(group, qid, mode, "boolean", "yes", 0.75, "yes", True, 3, 1.5)


def test_predictions_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    with PredictionWriter(out, append=False) as writer:
        writer.write_group([_row("g,1", "a"), _row("g,1", "b", "standalone")])
    rows = read_predictions(out)
    assert rows == [_row("g,1", "a"), _row("g,1", "b", "standalone")]
    assert out.read_text().splitlines()[0] == ",".join(OUTPUT_COLUMNS)


def test_recover_keeps_complete_groups_and_cuts_the_rest(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    with PredictionWriter(out, append=False) as writer:
        writer.write_group([_row("g1", "a"), _row("g1", "b")])
        writer.write_group([_row("g2", "a"), _row("g2", "b")])
    complete = out.read_bytes()
    # an interrupted third group: one whole line and a partial one
    with out.open("ab") as handle:
        handle.write(b"g3,a,joint,boolean,yes,0.5,,,1,1.0\ng3,b,joi")
    expected = {"g1": 2, "g2": 2, "g3": 2}
    assert recover(out, expected) == {"g1", "g2"}
    assert out.read_bytes() == complete
    # appending after recovery continues the same file
    with PredictionWriter(out, append=True) as writer:
        writer.write_group([_row("g3", "a"), _row("g3", "b")])
    assert [r.group_id for r in read_predictions(out)] == ["g1", "g1", "g2", "g2", "g3", "g3"]
    assert recover(out, expected) == {"g1", "g2", "g3"}


def test_recover_stops_at_an_incomplete_group_even_if_later_ones_are_whole(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out.csv"
    with PredictionWriter(out, append=False) as writer:
        writer.write_group([_row("g1", "a"), _row("g1", "b")])
        header_and_g1 = out.read_bytes()
        writer.write_group([_row("g2", "a")])  # short: g2 expects 2 rows
        writer.write_group([_row("g3", "a"), _row("g3", "b")])
    assert recover(out, {"g1": 2, "g2": 2, "g3": 2}) == {"g1"}
    assert out.read_bytes() == header_and_g1


def test_recover_stops_at_a_group_written_a_second_time(tmp_path: Path) -> None:
    """A group that comes back after it was complete (two runs appended into one file) ends
    what is kept: reading on would keep its rows twice in the predictions."""
    out = tmp_path / "out.csv"
    with PredictionWriter(out, append=False) as writer:
        writer.write_group([_row("g1", "a"), _row("g1", "b")])
        writer.write_group([_row("g2", "a"), _row("g2", "b")])
        first_two = out.read_bytes()
        writer.write_group([_row("g1", "a"), _row("g1", "b")])
        writer.write_group([_row("g3", "a"), _row("g3", "b")])
    assert recover(out, {"g1": 2, "g2": 2, "g3": 2}) == {"g1", "g2"}
    assert out.read_bytes() == first_two


def test_recover_refuses_a_foreign_file(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    out.write_text("name,value\nx,1\n")
    with pytest.raises(DecisionInputError, match="not a predictions file"):
        recover(out, {"x": 1})
    assert recover(tmp_path / "none.csv", {}) == set()


@pytest.mark.parametrize(("column", "cell"), [("confidence", "high"), ("correct", "yes"),
                                              ("steps", "")])
def test_a_predictions_row_with_a_bad_cell_is_refused_by_its_line(
    tmp_path: Path, column: str, cell: str
) -> None:
    out = tmp_path / "out.csv"
    with PredictionWriter(out, append=False) as writer:
        writer.write_group([_row("g1", "a"), _row("g1", "b")])
    lines = out.read_text().splitlines(keepends=True)
    cells = next(csv.reader([lines[2]]))
    cells[OUTPUT_COLUMNS.index(column)] = cell
    lines[2] = ",".join(cells) + "\n"  # a hand-edited predictions file
    out.write_text("".join(lines))
    before = out.read_bytes()
    # read back: was a ValueError traceback (after a whole resumed run), or "yes" read as wrong
    with pytest.raises(DecisionInputError, match=f"out.csv:3: .*{column}"):
        read_predictions(out)
    # resumed: refused before anything is decided, the file untouched
    with pytest.raises(DecisionInputError, match=f"out.csv:3: .*{column}"):
        recover(out, {"g1": 2})
    assert out.read_bytes() == before


def test_a_malformed_first_row_skips_only_itself(tmp_path: Path) -> None:
    # the later rows leave the document empty, as the format allows: they still join the group
    path = tmp_path / "in.csv"
    path.write_text(_csv([
        ["g", "The document.", "q1", "Q1?", "choice", "[]", ""],
        ["g", "", "q2", "Q2?", "boolean", "", "true"],
        ["g", "", "q3", "Q3?", "boolean", "", ""],
        ["h", "Another document.", "q1", "Q?", "choice", "[not json", ""],
    ]), encoding="utf-8")
    groups, problems = read_groups(path)
    assert [(p.line, p.group_id) for p in problems] == [(2, "g"), (5, "h")]
    assert "non-empty JSON list" in problems[0].reason
    assert [g.group_id for g in groups] == ["g"]  # h had no good row: left out, not empty
    assert groups[0].document == "The document."
    assert [q.question.id for q in groups[0].questions] == ["q2", "q3"]


def test_a_byte_order_mark_before_the_header_is_ignored(tmp_path: Path) -> None:
    # a spreadsheet's "CSV UTF-8" export starts with one
    path = tmp_path / "in.csv"
    path.write_bytes(b"\xef\xbb\xbf" + _csv([["g", "D", "q", "Q", "boolean", "", "true"]])
                     .encode("utf-8"))
    groups, problems = read_groups(path)
    assert problems == [] and groups[0].group_id == "g"


def test_a_byte_that_is_not_utf8_skips_only_its_row_by_its_line(tmp_path: Path) -> None:
    # A strict decoder failed a whole read-ahead chunk: about 70 rows were lost silently and the
    # one reported line was some line before the bad byte.
    multi = ["m", "line one\nline two", "q1", "Q?", "boolean", "", ""]
    rows = [multi] + [[f"g{i}", "A document. " * 10, "q1", "Q?", "boolean", "", "true"]
                      for i in range(300)]
    data = _csv(rows).encode("utf-8").split(b"\n")
    data[150] = data[150].replace(b"A document", b"Caf\xe9", 1)  # line 151: group g147
    path = tmp_path / "in.csv"
    path.write_bytes(b"\n".join(data))
    groups, problems = read_groups(path)
    assert [(p.line, p.group_id) for p in problems] == [(151, None)]
    assert problems[0].reason == ("not UTF-8 (byte 0xe9 in the document cell); save the file "
                                  "as UTF-8")
    assert [g.group_id for g in groups] == ["m"] + [f"g{i}" for i in range(300) if i != 147]
    with pytest.raises(DecisionInputError, match=r"in\.csv:151: not UTF-8"):
        read_groups(path, strict=True)
    path.write_bytes(b"group_\xff," + _csv([]).encode("utf-8").split(b",", 1)[1])
    with pytest.raises(DecisionInputError, match=r"in\.csv:1: header is not UTF-8 \(byte 0xff"):
        read_groups(path)


def test_recover_keeps_groups_whose_cells_hold_other_line_breaks(tmp_path: Path) -> None:
    # U+2028, \x85, \x0c and friends are left unquoted by the csv writer; only "\n" ends a row
    out = tmp_path / "out.csv"
    rows = [PredictionRow(f"g{i}", "a", "joint", "pattern", text, 0.5, None, None, 1, 1.0)
            for i, text in enumerate(["x\u2028y", "p\x0cq", "r\x85s", "plain"])]
    with PredictionWriter(out, append=False) as writer:
        for row in rows:
            writer.write_group([row])
    complete = out.read_bytes()
    assert recover(out, {f"g{i}": 1 for i in range(4)}) == {"g0", "g1", "g2", "g3"}
    assert out.read_bytes() == complete


def test_a_lone_carriage_return_in_a_cell_is_quoted(tmp_path: Path) -> None:
    # csv readers end a row at an unquoted "\r", which the writer left unquoted: the finished
    # file could not be read back (no summary) nor resumed
    out = tmp_path / "out.csv"
    odd = PredictionRow("g1", "a", "joint", "choice", "a\rb", 0.5, "c\rd", False, 1, 1.0)
    with PredictionWriter(out, append=False) as writer:
        writer.write_group([odd])
        writer.write_group([_row("g2", "a")])
    assert read_predictions(out) == [odd, _row("g2", "a")]
    complete = out.read_bytes()
    assert recover(out, {"g1": 1, "g2": 1}, ("joint",)) == {"g1", "g2"}
    assert out.read_bytes() == complete


def test_recover_refuses_a_file_of_fewer_modes_untouched(tmp_path: Path) -> None:
    # a finished joint run resumed with --mode both had every group cut away and redone
    out = tmp_path / "out.csv"
    with PredictionWriter(out, append=False) as writer:
        for group in ("g1", "g2"):
            writer.write_group([_row(group, "a"), _row(group, "b")])
    before = out.read_bytes()
    both = ("joint", "standalone")
    with pytest.raises(DecisionInputError, match="holds joint predictions only"):
        recover(out, {"g1": 4, "g2": 4}, both)
    assert out.read_bytes() == before
    # a torn last write (its group's joint rows only) is cut as before
    with PredictionWriter(out, append=False) as writer:
        writer.write_group([_row("g1", m_q[1], m_q[0]) for m_q in
                            [("joint", "a"), ("joint", "b"), ("standalone", "a"),
                             ("standalone", "b")]])
        writer.write_group([_row("g2", "a"), _row("g2", "b")])
    assert recover(out, {"g1": 4, "g2": 4}, both) == {"g1"}


def test_recover_refuses_a_file_of_another_mode_untouched(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    with PredictionWriter(out, append=False) as writer:
        writer.write_group([_row("g1", "a"), _row("g1", "a", "standalone")])
        writer.write_group([_row("g2", "a"), _row("g2", "a", "standalone")])
    before = out.read_bytes()
    with pytest.raises(DecisionInputError, match="holds standalone predictions"):
        recover(out, {"g1": 1, "g2": 1}, ("joint",))
    assert out.read_bytes() == before
    assert recover(out, {"g1": 2, "g2": 2}, ("joint", "standalone")) == {"g1", "g2"}


def test_recover_refuses_predictions_of_another_input_untouched(tmp_path: Path) -> None:
    # a smaller or different input used to truncate the file at its first unknown group
    out = tmp_path / "out.csv"
    with PredictionWriter(out, append=False) as writer:
        for group in ("g1", "g2", "g3"):
            writer.write_group([_row(group, "a"), _row(group, "b")])
    before = out.read_bytes()
    with pytest.raises(DecisionInputError, match="group 'g3', which this input does not have"):
        recover(out, {"g1": 2, "g2": 2})  # an input of the first two groups only
    assert out.read_bytes() == before
    with pytest.raises(DecisionInputError, match="another input"):
        recover(out, {"h1": 2, "h2": 2})
    assert out.read_bytes() == before
    # the same groups with other questions: refused as well, by question id
    with pytest.raises(DecisionInputError, match="question 'b' of group 'g1'"):
        recover(out, {"g1": 2, "g2": 2, "g3": 2}, questions={"g1": {"a", "c"}, "g2": {"a", "b"},
                                                            "g3": {"a", "b"}})
    assert out.read_bytes() == before
    questions = {g: {"a", "b"} for g in ("g1", "g2", "g3")}
    assert recover(out, {"g1": 2, "g2": 2, "g3": 2}, questions=questions) == {"g1", "g2", "g3"}
    # a group of the input whose question was added since is redone, with the ones after it
    assert recover(out, {"g1": 2, "g2": 3, "g3": 2},
                   questions={**questions, "g2": {"a", "b", "c"}}) == {"g1"}


def test_unwritable_or_unreadable_predictions_path(tmp_path: Path) -> None:
    with pytest.raises(DecisionInputError, match="cannot write"):
        PredictionWriter(tmp_path / "no-such-dir" / "out.csv", append=False)
    with pytest.raises(DecisionInputError, match="cannot read"):
        recover(tmp_path, {})  # a directory


def test_distinct_outputs_never_share_a_summary() -> None:
    names = ["preds.csv", "preds", "preds.v1", "preds.v2", "preds.tsv", "preds.CSV",
             "preds.summary", "preds.v1.csv", "preds.csv.csv", "a/preds.csv"]
    paths = [p for name in names for p in summary_paths(Path(name))]
    assert len(set(paths)) == len(paths)  # preds.v1 and preds.v2 both wrote preds.summary.*
    assert summary_paths(Path("runs/preds.csv")) == (Path("runs/preds.summary.json"),
                                                     Path("runs/preds.summary.md"))
    assert summary_paths(Path("preds.v1")) == (Path("preds.v1-summary.json"),
                                               Path("preds.v1-summary.md"))


def test_the_skipped_table_keeps_a_group_id_with_a_bar_or_line_break_in_its_cell() -> None:
    """A group id holding ``|`` (or a line break) split its row of the summary's Skipped table."""
    from decision.scoring.groups import Problem
    from decision.scoring.runner import ScoreResult
    from decision.scoring.summary import build_summary

    result = ScoreResult(groups=[], modes=("joint",), resumed=0, scored=0, problems=[
        Problem(3, "a|b", "bad | options"), Problem(4, "c\nd", "why")])
    _, markdown = build_summary(result, "m", Path("in.csv"), Path("out.csv"))
    rows = [line for line in markdown.splitlines() if line.startswith("| 3 ") or
            line.startswith("| 4 ")]
    assert rows == ["| 3 | a\\|b | bad \\| options |", "| 4 | c d | why |"]
