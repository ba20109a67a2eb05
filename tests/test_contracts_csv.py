"""Batch-scoring CSV: round trip, file documents, clear errors, and the generate CLI."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from apps.contracts import generate_group
from apps.contracts.csv_format import (
    HEADER,
    CsvGroup,
    CsvQuestion,
    parse_gold,
    read_groups,
    write_groups,
)
from decision.errors import DecisionInputError

ROOT = Path(__file__).resolve().parents[1]


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    groups = [generate_group(s, level) for s in range(60) for level in (1, 2)]
    path = tmp_path / "groups.csv"
    rows = write_groups(groups, path)
    assert rows == sum(len(g.questions) for g in groups)
    back = read_groups(path)
    assert [b.group_id for b in back] == [g.group_id for g in groups]
    for g, b in zip(groups, back, strict=True):
        assert b.document == g.document
        assert [(q.id, q.text, q.answer, q.gold) for q in b.questions] == [
            (q.id, q.text, q.answer, q.gold) for q in g.questions]
        assert all(type(bq.gold) is type(q.gold) for bq, q in zip(b.questions, g.questions,
                                                                   strict=True))


def test_cells_are_in_the_documented_format(tmp_path: Path) -> None:
    group = CsvGroup("g1", "Doc.", [
        CsvQuestion("a", "Pick?", {"type": "choice", "options": ["x", "not stated"]}, "x"),
        CsvQuestion("b", "Yes?", {"type": "boolean"}, False),
        CsvQuestion("c", "How many?", {"type": "integer", "minimum": 0, "maximum": 500}, 42),
    ])
    path = tmp_path / "f.csv"
    write_groups([group], path)
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    assert tuple(rows[0]) == HEADER == ("group_id", "document", "question_id", "question",
                                        "answer_type", "options", "gold")
    assert rows[1][4:] == ["choice", '["x", "not stated"]', "x"]
    assert rows[2][4:] == ["boolean", "{}", "false"]
    assert rows[3][4:] == ["integer", '{"minimum": 0, "maximum": 500}', "42"]


def _write(path: Path, rows: list[list[str]], header: tuple[str, ...] = HEADER) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_document_from_a_file_and_empty_cells(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    # saved with a byte-order mark, which was read as the document's first character
    (tmp_path / "docs" / "lease.txt").write_text("\ufeffA lease.\nRent: $900 per month.",
                                                 encoding="utf-8")
    path = _write(tmp_path / "in.csv", [
        ["g", "@docs/lease.txt", "q1", "Rent?", "integer", '{"minimum": 0}', "900"],
        ["g", "", "q2", "Late?", "boolean", "{}", ""],
        ["h", "@@handle", "q1", "Who?", "choice", '["a", "b"]', "b"],
    ], header=HEADER)
    g, h = read_groups(path)
    assert g.document == "A lease.\nRent: $900 per month."
    assert [q.gold for q in g.questions] == [900, None]
    assert h.document == "@handle" and h.questions[0].gold == "b"


def test_a_document_file_keeps_its_line_ends_as_the_same_text_inline_does(
        tmp_path: Path) -> None:
    """A document read from ``@docs/ID.txt`` in text mode had its CR LF and CR made LF, while
    the same text in the cell (or sent over HTTP) kept them: the model read two documents."""
    text = "Clause 1.\r\nClause 2.\rClause 3.\n"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_bytes(text.encode())
    path = _write(tmp_path / "in.csv", [
        ["f", "@docs/a.txt", "q1", "Yes?", "boolean", "{}", ""],
        ["i", text, "q1", "Yes?", "boolean", "{}", ""],
    ], header=HEADER)
    from_file, inline = read_groups(path)
    assert from_file.document == inline.document == text


def test_gold_column_is_optional(tmp_path: Path) -> None:
    path = _write(tmp_path / "in.csv", [["g", "Doc", "q1", "Yes?", "boolean", "{}"]],
                  header=HEADER[:-1])
    assert read_groups(path)[0].questions[0].gold is None


def test_a_byte_order_mark_before_the_header_is_ignored(tmp_path: Path) -> None:
    """Spreadsheets' "CSV UTF-8" starts with U+FEFF, which must not stick to ``group_id``."""
    path = _write(tmp_path / "in.csv", [["g", "Doc", "q1", "Yes?", "boolean", "{}", "true"]])
    path.write_bytes("\ufeff".encode() + path.read_bytes())
    assert read_groups(path)[0].questions[0].gold is True


@pytest.mark.parametrize("rows,header,field", [
    ([["g", "D", "q1", "Q?", "boolean", "{}", "maybe"]], HEADER, "row 2.gold"),
    ([["g", "D", "q1", "Q?", "integer", '{"maximum": 5}', "6"]], HEADER, "row 2.gold"),
    ([["g", "D", "q1", "Q?", "choice", '["a"]', "b"]], HEADER, "row 2.gold"),
    ([["g", "D", "q1", "Q?", "choice", "{}", "a"]], HEADER, "row 2.options"),
    ([["g", "D", "q1", "Q?", "integer", "{bad", "1"]], HEADER, "row 2.options"),
    # a bound "10" crashed the read (gold 5 > "10": TypeError); true was read as 1
    ([["g", "D", "q1", "Q?", "integer", '{"maximum": "10"}', "5"]], HEADER, "row 2.options"),
    ([["g", "D", "q1", "Q?", "integer", '{"minimum": true}', "5"]], HEADER, "row 2.options"),
    ([["g", "D", "q1", "Q?", "number", '{"max_tokens": 4.0}', "5"]], HEADER, "row 2.options"),
    ([["g", "", "q1", "Q?", "boolean", "{}", "true"]], HEADER, "row 2.document"),
    ([["g", "D", "q1", "Q?", "boolean", "{}", "true"],
      ["g", "E", "q2", "Q?", "boolean", "{}", "true"]], HEADER, "row 3.document"),
    ([["g", "D", "q1", "Q?", "boolean", "{}", "true"]] * 2, HEADER, "row 3.question_id"),
    ([["g", "D", f"q{i}", "Q?", "boolean", "{}", "true"] for i in range(9)], HEADER,
     "row 10.group_id"),
    ([["g", "@missing.txt", "q1", "Q?", "boolean", "{}", "true"]], HEADER, "row 2.document"),
    ([["g", "D", "q1", "Q?", "boolean", "{}"]], HEADER, "row 2"),
    ([], ("id", "document"), "header"),
])
def test_bad_rows_name_the_field(tmp_path: Path, rows: list[list[str]],
                                 header: tuple[str, ...], field: str) -> None:
    path = _write(tmp_path / "bad.csv", rows, header=header)
    with pytest.raises(DecisionInputError) as info:
        read_groups(path)
    assert info.value.field == field


def test_generate_cli_writes_a_valid_csv(tmp_path: Path) -> None:
    out = tmp_path / "test.csv"
    done = subprocess.run(
        [sys.executable, "-m", "apps.contracts.generate", "--seed-start", "20000000",
         "--groups", "25", "--level", "1", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "split: test" in done.stderr
    groups = read_groups(out)
    expected = [generate_group(s, 1) for s in range(20_000_000, 20_000_025)]
    assert [g.group_id for g in groups] == [g.group_id for g in expected]
    assert [[q.gold for q in g.questions] for g in groups] == [
        [q.gold for q in g.questions] for g in expected]
    checked = subprocess.run([sys.executable, "-m", "apps.contracts.checker", str(out)],
                             cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert checked.returncode == 0, checked.stdout
    assert "gold answers agree" in checked.stdout


def test_generate_cli_refuses_a_range_across_splits(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "apps.contracts.generate", "--seed-start", "9999999",
         "--groups", "2", "--out", str(tmp_path / "x.csv")],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "straddle" in done.stderr


def test_document_starting_with_at_survives_the_round_trip(tmp_path: Path) -> None:
    group = CsvGroup("g", "@home: a note\nsecond line", [
        CsvQuestion("q1", "Yes?", {"type": "boolean"}, True)])
    path = tmp_path / "at.csv"
    write_groups([group], path)
    assert read_groups(path) == [group]


def test_generate_cli_refuses_a_range_that_spans_a_whole_split(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Both ends outside every split, the test split in between: refused, nothing generated."""
    from apps.contracts import generate

    def no_generation(*_: object) -> None:
        raise AssertionError("generated groups for a range that spans the test split")

    monkeypatch.setattr(generate, "generate_groups", no_generation)
    out = tmp_path / "x.csv"
    assert generate.main(["--seed-start", "10100000", "--groups", "10000001",
                          "--out", str(out)]) == 2
    assert "straddle" in capsys.readouterr().err and not out.exists()
    assert generate.range_split(10_100_000, 10_200_000) is None  # outside every split: fine
    assert generate.range_split(20_000_000, 20_099_999) == "test"
    with pytest.raises(DecisionInputError):
        generate.range_split(19_999_999, 20_000_000)  # none, then test


def test_json_gold_round_trips_as_json(tmp_path: Path) -> None:
    """A json answer's gold is written as JSON: a string keeps its quotes, "42" stays a string."""
    answer = {"type": "json", "schema": {"type": "string"}}
    group = CsvGroup("g", "doc", [CsvQuestion("q1", "Name?", answer, "abc"),
                                  CsvQuestion("q2", "Code?", answer, "42"),
                                  CsvQuestion("q3", "Data?", {"type": "json", "schema": {}},
                                              {"a": [1, True]})])
    path = tmp_path / "json.csv"
    write_groups([group], path)
    assert read_groups(path) == [group]



def test_cells_with_quotes_commas_and_line_ends_round_trip_exactly(tmp_path: Path) -> None:
    """A document pasted from Windows keeps its CRLF line ends, a lone CR, commas and quotes:
    the CSV is opened without newline translation, as the csv module requires."""
    document = 'Line one,\r\nLine "two"\rthree\n\n"quoted", end\r\n'
    group = CsvGroup("g,1", document, [
        CsvQuestion("q1", 'Is "it", on\r\ntwo lines?', {"type": "boolean"}, False)])
    path = tmp_path / "crlf.csv"
    write_groups([group], path)
    assert read_groups(path) == [group]


@pytest.mark.parametrize(("text", "ok"), [("-1", False), ("0", True), ("10", True),
                                          ("11", False)])
def test_integer_gold_bounds_include_a_bound_of_zero(text: str, ok: bool) -> None:
    """minimum 0 (most counts) is a bound like any other, not a missing one."""
    answer = {"type": "integer", "minimum": 0, "maximum": 10}
    if ok:
        assert parse_gold(text, answer) == int(text)
    else:
        with pytest.raises(DecisionInputError, match="outside"):
            parse_gold(text, answer)
    with pytest.raises(DecisionInputError, match="outside"):
        parse_gold("1", {"type": "integer", "minimum": -5, "maximum": 0})

@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-Infinity", "1e999"])
def test_number_gold_must_be_finite(text: str) -> None:
    """nan never equals a prediction and 1e999 is infinity: such a gold is malformed."""
    with pytest.raises(DecisionInputError, match="does not fit a number answer"):
        parse_gold(text, {"type": "number"})
    assert parse_gold("2.5e3", {"type": "number"}) == 2500.0


def test_a_document_file_that_is_not_utf8_names_its_row(tmp_path: Path) -> None:
    (tmp_path / "doc.txt").write_bytes(b"Caf\xe9")
    path = _write(tmp_path / "in.csv", [["g", "@doc.txt", "q1", "Q?", "boolean", "{}", ""]])
    with pytest.raises(DecisionInputError, match=r"doc\.txt' \(not UTF-8: byte 0xe9") as info:
        read_groups(path)
    assert info.value.field == "row 2.document"


def test_generate_cli_with_an_unwritable_out_ends_with_one_error_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The split line first (printed before the write), then one error line, no traceback."""
    from apps.contracts import generate

    for out in (tmp_path / "no-dir" / "x.csv", tmp_path):  # a missing folder; a directory
        assert generate.main(["--seed-start", "20000000", "--groups", "2",
                              "--out", str(out)]) == 2
        err = capsys.readouterr().err.splitlines()
        assert err[-1].startswith(f"error: cannot write {out}: "), err
        assert err[0].startswith("seeds 20000000..") and len(err) == 2, err


def test_a_byte_that_is_not_utf8_names_its_row(tmp_path: Path) -> None:
    # used to end the checker CLI with a UnicodeDecodeError traceback
    path = _write(tmp_path / "in.csv", [["g", "Doc", "q1", "Q?", "boolean", "{}", "true"],
                                        ["h", "Caf-", "q1", "Q?", "boolean", "{}", "true"]])
    path.write_bytes(path.read_bytes().replace(b"Caf-", b"Caf\xe9"))
    with pytest.raises(DecisionInputError,
                       match=r"^row 3: not UTF-8 \(byte 0xe9 in the document cell\)") as info:
        read_groups(path)
    assert info.value.field == "row 3"
    done = subprocess.run([sys.executable, "-m", "apps.contracts.checker", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and done.stderr.startswith("error: row 3: not UTF-8"), done.stderr


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("1_000", {"type": "integer"}),
        ("١٢", {"type": "integer"}),
        ("1_0.5", {"type": "number"}),
        ("infinity", {"type": "number"}),
        ('{"x": NaN}', {"type": "json", "schema": {"type": "object"}}),
        ("Infinity", {"type": "json", "schema": {"type": "number"}}),
    ],
)
def test_gold_is_written_as_a_decoded_answer_would_be(text: str, answer: dict) -> None:
    """Python's parsers take digit separators, other scripts' digits and NaN; an answer never holds
    them, so such a gold is malformed rather than a row that can never be scored right."""
    with pytest.raises(DecisionInputError, match="does not fit"):
        parse_gold(text, answer)
    assert parse_gold(" -12 ", {"type": "integer"}) == -12
    assert parse_gold(".5", {"type": "number"}) == 0.5
    assert parse_gold('{"x": 1}', {"type": "json", "schema": {"type": "object"}}) == {"x": 1}


def test_a_document_path_with_a_nul_byte_or_a_loop_names_its_row(tmp_path: Path) -> None:
    """``@a<NUL>b`` ended the read (and the checker CLI, and ``decision score``) with
    ``ValueError: embedded null byte``, a symlink loop with RuntimeError; each is a document
    that cannot be read, by its row."""
    path = _write(tmp_path / "in.csv", [["g", "@a\x00b.txt", "q1", "Q?", "boolean", "{}", ""]])
    with pytest.raises(DecisionInputError, match=r"^row 2: cannot read document file") as info:
        read_groups(path)
    assert info.value.field == "row 2.document"
    # a symlink loop: Path.resolve() raised RuntimeError before the file was opened
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    path = _write(tmp_path / "in.csv", [["g", "@loop1", "q1", "Q?", "boolean", "{}", ""]])
    with pytest.raises(DecisionInputError, match=r"^row 2: cannot read document file 'loop1'"):
        read_groups(path)


def test_a_cell_over_the_csv_field_limit_names_its_row(tmp_path: Path) -> None:
    """A cell longer than the csv module's field limit (16 MiB here) raised ``_csv.Error`` with a
    traceback; it is a DecisionInputError naming the row. The limit is lowered for the test so
    that it need not write a 16 MiB file."""
    path = _write(tmp_path / "in.csv", [["g", "Doc", "q1", "Q?", "boolean", "{}", "true"],
                                        ["h", "D" * 500, "q1", "Q?", "boolean", "{}", "true"]])
    old = csv.field_size_limit(200)
    try:
        with pytest.raises(DecisionInputError, match=r"^row 3: .*field larger than") as info:
            read_groups(path)
    finally:
        csv.field_size_limit(old)
    assert info.value.field == "row 3"
