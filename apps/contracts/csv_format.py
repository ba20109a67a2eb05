"""The batch-scoring CSV: one row per question, groups of rows share a document.

Header (exactly): ``group_id,document,question_id,question,answer_type,options,gold``.

- ``answer_type``: the answer schema's ``type`` (``choice``, ``boolean``, ``integer``, ...).
- ``options``: JSON. For ``choice`` the list of options; for other types an object with the
  schema's remaining fields (``{"minimum": 0, "maximum": 500}``; ``{}`` for boolean).
- ``gold``: the answer as text (choice: the option; boolean: ``true``/``false``; integer: decimal;
  number: a finite decimal, not ``nan`` or ``1e999``; json: the value as JSON, a string with its
  quotes); empty when unknown (an input to score without gold). The ``gold`` column may be left
  out.
- ``document``: the document inline, or ``@relative/path.txt`` to read a file relative to the
  CSV's folder (``@@`` escapes a document that itself starts with ``@``). Rows after a group's
  first may leave it empty; a non-empty cell must repeat the same document.

The scoring CLI reuses ``read_groups``; the generator CLI writes with ``write_groups``.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from decision.errors import DecisionInputError
from decision.files import read_document

HEADER: tuple[str, ...] = ("group_id", "document", "question_id", "question", "answer_type",
                           "options", "gold")
MAX_QUESTIONS = 8

csv.field_size_limit(1 << 24)  # documents are long cells


class QuestionLike(Protocol):
    id: str
    text: str
    answer: dict[str, Any]
    gold: Any


class GroupLike(Protocol):
    group_id: str
    document: str
    questions: Sequence[QuestionLike]


@dataclass
class CsvQuestion:
    """A question read from the CSV; ``gold`` is typed (None when the cell is empty)."""

    id: str
    text: str
    answer: dict[str, Any]
    gold: Any = None


@dataclass
class CsvGroup:
    """A group read from the CSV (same fields as ``types.Group`` that the CSV carries)."""

    group_id: str
    document: str
    questions: list[CsvQuestion] = field(default_factory=list)


def schema_to_cells(answer: dict[str, Any]) -> tuple[str, str]:
    """(answer_type, options JSON) for an answer schema dict."""
    kind = answer.get("type")
    if not isinstance(kind, str) or not kind:
        raise DecisionInputError(f"answer schema without a type: {answer!r}", "answer.type")
    if kind == "choice":
        return kind, json.dumps(list(answer.get("options", [])))
    rest = {k: v for k, v in answer.items() if k != "type"}
    return kind, json.dumps(rest)


def gold_to_text(gold: Any, answer: dict[str, Any] | None = None) -> str:
    """The gold cell: booleans as true/false, numbers in decimal, JSON values as JSON.

    Under a ``json`` answer schema every value is written as JSON (a string gold ``"abc"`` as
    ``"abc"`` with its quotes), since ``parse_gold`` reads that cell with ``json.loads``.
    """
    if gold is None:
        return ""
    if answer is not None and answer.get("type") == "json":
        return json.dumps(gold)
    if isinstance(gold, bool):
        return "true" if gold else "false"
    if isinstance(gold, int | float | str):
        return str(gold)
    return json.dumps(gold)


def write_groups(groups: Iterable[GroupLike], path: str | Path) -> int:
    """Write groups as CSV rows (the document inline on every row); returns the rows written."""
    rows = 0
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        for group in groups:
            document = "@" + group.document if group.document.startswith("@") else group.document
            for q in group.questions:
                answer_type, options = schema_to_cells(q.answer)
                writer.writerow([group.group_id, document, q.id, q.text, answer_type, options,
                                 gold_to_text(q.gold, q.answer)])
                rows += 1
    return rows


def _cell_error(where: str | None, cell: str, message: str) -> DecisionInputError:
    """An error about ``cell`` of the row ``where`` names (None: the caller names the row)."""
    if where is None:
        return DecisionInputError(message, cell)
    return DecisionInputError(f"{where}: {message}", f"{where}.{cell}")


_INTEGER_FIELDS = ("minimum", "maximum", "max_tokens")  # answer-schema fields that take integers


def schema_from_cells(answer_type: str, options_cell: str,
                      where: str | None = "row") -> dict[str, Any]:
    """The answer schema dict from the ``answer_type`` and ``options`` cells."""
    try:
        options = json.loads(options_cell) if options_cell.strip() else {}
    except json.JSONDecodeError as exc:
        raise _cell_error(where, "options", f"options is not JSON ({exc.msg})") from None
    except (ValueError, RecursionError):  # a number of over 4,300 digits; nesting too deep
        raise _cell_error(where, "options",
                          "options is JSON this tool does not read (a number of more than "
                          "4,300 digits, or arrays or objects nested too deep)") from None
    if answer_type == "choice":
        if not isinstance(options, list) or not options or not all(
                isinstance(o, str) for o in options):
            raise _cell_error(where, "options",
                              "choice options must be a non-empty JSON list of strings")
        return {"type": "choice", "options": options}
    if not isinstance(options, dict):
        raise _cell_error(where, "options",
                          f"options for {answer_type!r} must be a JSON object")
    if "type" in options:
        raise _cell_error(where, "options", "options must not repeat the type")
    for name in _INTEGER_FIELDS:
        # as strict as the service's schema: "10", true and 10.0 are not read as integers
        value = options.get(name)
        if name in options and (isinstance(value, bool) or not isinstance(value, int)):
            raise _cell_error(where, "options",
                              f"{name} must be a JSON integer such as 10, not {json.dumps(value)}")
    return {"type": answer_type, **options}


_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_gold(text: str, answer: dict[str, Any], where: str | None = "gold") -> Any:
    """The typed gold value of a gold cell under its schema (None for an empty cell);
    ``where`` prefixes errors and is their field (None: field ``gold``, no prefix)."""
    if text == "":
        return None
    kind = answer["type"]
    field = where or "gold"
    prefix = f"{where}: " if where else ""
    bad = DecisionInputError(f"{prefix}gold {text!r} does not fit a {kind} answer", field)
    if kind == "choice":
        if text not in answer["options"]:
            raise bad
        return text
    if kind == "boolean":
        if text.strip().lower() not in ("true", "false"):
            raise bad
        return text.strip().lower() == "true"
    if kind == "integer":
        if not _INTEGER.fullmatch(text.strip()):  # int() would also take '1_000' and '١٢'
            raise bad
        try:
            value = int(text.strip())
        except ValueError:  # more than 4,300 digits
            raise bad from None
        low, high = answer.get("minimum"), answer.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            raise DecisionInputError(f"{prefix}gold {value} is outside [{low}, {high}]", field)
        return value
    if kind == "number":
        if not _DECIMAL.fullmatch(text.strip()):  # float() would also take '1_0', 'nan', 'inf'
            raise bad
        number = float(text)
        if not math.isfinite(number):  # nan equals nothing; 1e999 is infinity
            raise bad
        return number
    if kind == "json":
        try:
            return json.loads(text, parse_constant=_refuse_constant)
        except (ValueError, RecursionError):  # not JSON, NaN / Infinity, nesting too deep
            raise bad from None
    return text


def not_utf8(cells: Mapping[Any, str]) -> str | None:
    """Where the first byte that is not UTF-8 lies in cells read with ``surrogateescape`` (which
    makes it U+DC80-U+DCFF), as ``byte 0xe9 in the document cell``; None when all decoded."""
    for name, cell in cells.items():
        for char in cell:
            if "\udc80" <= char <= "\udcff":
                where = f" in the {name} cell" if isinstance(name, str) and name else ""
                return f"byte 0x{ord(char) - 0xDC00:02x}{where}"
    return None


def resolve_document(cell: str, base: Path, where: str | None = "row") -> str:
    """The document of a cell: inline text, ``@path`` read relative to ``base``, ``@@`` escape."""
    if cell.startswith("@@"):
        return cell[1:]
    if cell.startswith("@"):
        try:  # not resolve()d first: on a symlink loop it raises RuntimeError, open an OSError
            return read_document(base / cell[1:])  # a BOM is not text; line ends as written
        except OSError as exc:
            raise _cell_error(where, "document", f"cannot read document file {cell[1:]!r} "
                                                 f"({exc.strerror})") from None
        except UnicodeDecodeError as exc:
            raise _cell_error(where, "document", f"cannot read document file {cell[1:]!r} "
                                                 f"(not UTF-8: byte 0x{exc.object[exc.start]:02x} "
                                                 f"at offset {exc.start})") from None
        except ValueError:  # a NUL byte in the path, which no file name holds
            raise _cell_error(where, "document", f"cannot read document file {cell[1:]!r} "
                                                 "(a file name holds no NUL byte)") from None
    return cell


def _rows(reader: Iterator[list[str]]) -> Iterator[list[str]]:
    """The reader's rows; a ``csv.Error`` (a cell over the field limit, a 16 MiB document) is a
    DecisionInputError naming its row (the header is row 1), not a traceback."""
    number = 0
    while True:
        number += 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            where = "header" if number == 1 else f"row {number}"
            raise DecisionInputError(f"{where}: unreadable CSV ({exc})", where) from None
        yield row


def read_groups(path: str | Path) -> list[CsvGroup]:
    """Read a batch-scoring CSV into groups, in order of first appearance.

    Raises DecisionInputError naming the row and column for a bad header, a missing document,
    a duplicate question id, more than eight questions in a group, bad options, a gold value
    that does not fit its schema or a byte that is not UTF-8.
    """
    path = Path(path)
    groups: dict[str, CsvGroup] = {}
    try:
        # utf-8-sig: a spreadsheet's "CSV UTF-8" export starts with a byte-order mark;
        # surrogateescape: a byte that is not UTF-8 is reported with its row (not_utf8)
        handle = open(path, newline="", encoding="utf-8-sig", errors="surrogateescape")
    except OSError as exc:
        raise DecisionInputError(f"cannot open {path}: {exc.strerror}", "path") from None
    with handle:
        rows = _rows(csv.reader(handle))
        header = tuple(next(rows, ()))
        undecodable = not_utf8(dict(enumerate(header)))
        if undecodable:
            raise DecisionInputError(f"{path}: header is not UTF-8 ({undecodable})", "header")
        if header not in (HEADER, HEADER[:-1]):
            raise DecisionInputError(f"{path}: header must be {','.join(HEADER)}; got "
                                     f"{','.join(header)!r}", "header")
        for number, row in enumerate(rows, start=2):
            if not row:
                continue
            where = f"row {number}"
            if len(row) != len(header):
                raise DecisionInputError(f"{where}: expected {len(header)} cells, got {len(row)}",
                                         where)
            cells = dict(zip(header, row, strict=True))
            undecodable = not_utf8(cells)
            if undecodable:
                raise DecisionInputError(f"{where}: not UTF-8 ({undecodable}); save the file as "
                                         "UTF-8", where)
            group_id, question_id = cells["group_id"].strip(), cells["question_id"].strip()
            if not group_id or not question_id:
                raise DecisionInputError(f"{where}: group_id and question_id must not be empty",
                                         where)
            if not cells["question"].strip():
                raise DecisionInputError(f"{where}: empty question", f"{where}.question")
            if not cells["answer_type"].strip():
                raise DecisionInputError(f"{where}: empty answer_type", f"{where}.answer_type")
            document = resolve_document(cells["document"], path.parent, where)
            group = groups.get(group_id)
            if group is None:
                if not document:
                    raise DecisionInputError(f"{where}: the first row of group {group_id!r} needs "
                                             "a document", f"{where}.document")
                group = groups[group_id] = CsvGroup(group_id, document)
            elif document and document != group.document:
                raise DecisionInputError(f"{where}: group {group_id!r} has two different "
                                         "documents", f"{where}.document")
            if any(q.id == question_id for q in group.questions):
                raise DecisionInputError(f"{where}: duplicate question_id {question_id!r} in "
                                         f"group {group_id!r}", f"{where}.question_id")
            if len(group.questions) == MAX_QUESTIONS:
                raise DecisionInputError(f"{where}: group {group_id!r} has more than "
                                         f"{MAX_QUESTIONS} questions", f"{where}.group_id")
            answer = schema_from_cells(cells["answer_type"].strip(), cells["options"], where)
            gold = parse_gold(cells.get("gold", ""), answer, f"{where}.gold")
            group.questions.append(CsvQuestion(question_id, cells["question"], answer, gold))
    return list(groups.values())


# Names the scoring reader imported before the public ones existed; kept so it keeps working.
_schema = schema_from_cells
_document = resolve_document
