"""Question groups from the scoring CSV, with every malformed row reported by its line number.

The format is ``apps.contracts.csv_format``'s (header
``group_id,document,question_id,question,answer_type,options,gold``; ``@file`` documents; typed
gold), and its cell parsers are reused here. What this reader adds for batch scoring: a malformed
row is skipped with its reason and *physical* line number (quoted documents span lines) instead
of ending the read, unless ``strict``; the answer schema is validated by ``Question`` (so a bad
schema is caught here, not in the middle of a batch); the question count per group is left to the
engine, since standalone mode takes more than eight.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from apps.contracts.csv_format import HEADER, _document, _schema, not_utf8, parse_gold
from decision.errors import DecisionInputError
from decision.schemas.models import Question
from decision.schemas.regex_guard import check_regex
from decision.scoring.gold import gold_fits

INPUT_COLUMNS: tuple[str, ...] = HEADER
REQUIRED_COLUMNS: tuple[str, ...] = INPUT_COLUMNS[:-1]  # gold may be absent


@dataclass(frozen=True)
class Problem:
    """A row (or a whole group) left out, and why."""

    line: int
    group_id: str | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"line": self.line, "group_id": self.group_id, "reason": self.reason}


@dataclass(frozen=True)
class ScoredQuestion:
    line: int
    question: Question
    gold_text: str | None
    gold: Any | None


@dataclass
class InputGroup:
    group_id: str
    document: str
    line: int  # of its first row
    questions: list[ScoredQuestion] = field(default_factory=list)

    @property
    def has_gold(self) -> bool:
        return any(q.gold_text is not None for q in self.questions)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{where}: {err.get('msg')}{more}" if where else f"{err.get('msg')}{more}"


def read_groups(path: Path, *, strict: bool = False) -> tuple[list[InputGroup], list[Problem]]:
    """Groups in order of first appearance, and the rows left out.

    With ``strict`` the first malformed row raises ``DecisionInputError`` naming its line.
    """
    problems: list[Problem] = []
    groups: dict[str, InputGroup] = {}

    def bad(line: int, group_id: str | None, reason: str) -> None:
        if strict:
            raise DecisionInputError(f"{path}:{line}: {reason}", f"line {line}")
        problems.append(Problem(line, group_id, reason))

    try:
        # utf-8-sig: a spreadsheet's "CSV UTF-8" export starts with a byte-order mark, which
        # would otherwise stick to the first column's name ("header lacks group_id").
        # surrogateescape: a byte that is not UTF-8 reaches its row as a lone surrogate, so that
        # row alone is reported, by its line; a strict decoder fails a whole read-ahead chunk,
        # losing the rows in it and naming some line before it.
        handle = path.open(encoding="utf-8-sig", errors="surrogateescape", newline="")
    except OSError as exc:
        raise DecisionInputError(f"{path}: cannot open: {exc.strerror}", "input") from None
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            raise DecisionInputError(f"{path}: empty file, expected a header", "input") from None
        except csv.Error as exc:
            raise DecisionInputError(f"{path}:1: unreadable header: {exc}", "input") from None
        header = [h.strip() for h in header]
        undecodable = not_utf8(dict(enumerate(header)))
        if undecodable:
            raise DecisionInputError(f"{path}:1: header is not UTF-8 ({undecodable})", "input")
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise DecisionInputError(
                f"{path}: header lacks {', '.join(missing)}; expected {','.join(INPUT_COLUMNS)}",
                "input",
            )
        index = {name: header.index(name) for name in INPUT_COLUMNS if name in header}
        line = reader.line_num
        while True:
            start = line + 1
            try:
                record = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                line = reader.line_num
                bad(start, None, f"unreadable CSV: {exc}")
                continue
            line = reader.line_num
            if not any(cell.strip() for cell in record):
                continue  # blank line
            if len(record) != len(header):
                bad(start, record[0] if record else None,
                    f"{len(record)} cells, the header has {len(header)}")
                continue
            cells = {name: record[i] for name, i in index.items()}
            group_id = cells["group_id"].strip()
            undecodable = not_utf8(cells)
            if undecodable:
                # the group id too may hold the bad byte, which stderr could not print
                bad(start, None, f"not UTF-8 ({undecodable}); save the file as UTF-8")
                continue
            try:
                _add_row(groups, path.parent, start, group_id, cells)
            except DecisionInputError as exc:
                bad(start, group_id or None, exc.message)
    # A group all of whose rows were malformed has no questions: each row is reported already.
    return [g for g in groups.values() if g.questions], problems


def _add_row(
    groups: dict[str, InputGroup], folder: Path, line: int, group_id: str,
    cells: dict[str, str],
) -> None:
    if not group_id:
        raise DecisionInputError("group_id is empty", "group_id")
    group = groups.get(group_id)
    document = _document(cells["document"], folder, None) if cells["document"] else ""
    if group is None:
        if not document.strip():
            raise DecisionInputError("the first row of a group must carry the document",
                                     "document")
        # Registered before its question is checked: a malformed first row is skipped alone,
        # and the group's later rows (which may leave the document empty) still join it.
        group = groups[group_id] = InputGroup(group_id, document, line)
    elif document and document != group.document:
        raise DecisionInputError(
            f"document differs from the group's first row (line {group.line})", "document"
        )
    schema = _schema(cells["answer_type"].strip(), cells["options"], None)
    try:
        question = Question.model_validate(
            {"id": cells["question_id"].strip(), "text": cells["question"], "answer": schema}
        )
    except ValidationError as exc:
        raise DecisionInputError(_first_error(exc), "question") from None
    # The answer's language must be usable (a valid, bounded regex; a supported JSON schema):
    # checked here so such a row is reported by line rather than failing its group later.
    check_regex(question.answer.regex(), "options")
    if any(q.question.id == question.id for q in group.questions):
        raise DecisionInputError(f"duplicate question_id {question.id!r} in the group",
                                 "question_id")
    gold_text = cells.get("gold") or None
    gold = parse_gold(gold_text, schema, None) if gold_text is not None else None
    if gold is not None and not gold_fits(question.answer, gold):
        raise DecisionInputError(
            f"gold {gold_text!r} does not fit the {question.answer.type} answer's schema "
            "(the model could never give it)", "gold")
    group.questions.append(ScoredQuestion(line, question, gold_text, gold))
