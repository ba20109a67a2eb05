"""Question groups from the scoring CSV, with every malformed row reported by its line number.

Input header: ``group_id,document,question_id,question,answer_type,options,gold``. One row per
question; the rows of a group share ``group_id`` (and the document: later rows may leave it
empty). ``options`` is JSON: the option list for ``choice``, an object with the schema's other
fields for the other types (empty means none). A document cell starting with ``@`` names a file
relative to the CSV's folder. ``gold`` is optional.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from decision.errors import DecisionInputError
from decision.schemas.models import Question
from decision.scoring.gold import parse_gold

INPUT_COLUMNS: tuple[str, ...] = (
    "group_id", "document", "question_id", "question", "answer_type", "options", "gold",
)
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


def _answer_schema(answer_type: str, options_cell: str) -> dict[str, Any]:
    answer_type = answer_type.strip()
    if not answer_type:
        raise DecisionInputError("answer_type is empty", "answer_type")
    text = options_cell.strip()
    try:
        options = json.loads(text) if text else None
    except json.JSONDecodeError as exc:
        raise DecisionInputError(f"options is not JSON: {exc.msg}", "options") from None
    if answer_type == "choice":
        if not isinstance(options, list):
            raise DecisionInputError("options of a choice must be a JSON list", "options")
        return {"type": "choice", "options": options}
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise DecisionInputError(
            f"options of a {answer_type} answer must be a JSON object", "options"
        )
    if "type" in options:
        raise DecisionInputError("options must not repeat the type", "options")
    return {"type": answer_type, **options}


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{where}: {err.get('msg')}{more}" if where else f"{err.get('msg')}{more}"


class _DocumentFiles:
    """Reads ``@file`` documents relative to the CSV's folder, each file once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._cache: dict[str, str] = {}

    def resolve(self, cell: str) -> str:
        if not cell.startswith("@"):
            return cell
        name = cell[1:].strip()
        if name not in self._cache:
            path = self.folder / name
            try:
                self._cache[name] = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                raise DecisionInputError(
                    f"document file {name!r} cannot be read: {reason}", "document"
                ) from None
        return self._cache[name]


def read_groups(path: Path, *, strict: bool = False) -> tuple[list[InputGroup], list[Problem]]:
    """Groups in order of first appearance, and the rows left out.

    With ``strict`` the first malformed row raises ``DecisionInputError`` naming its line.
    """
    problems: list[Problem] = []
    groups: dict[str, InputGroup] = {}
    files = _DocumentFiles(path.parent)

    def bad(line: int, group_id: str | None, reason: str) -> None:
        if strict:
            raise DecisionInputError(f"{path}:{line}: {reason}", f"line {line}")
        problems.append(Problem(line, group_id, reason))

    try:
        handle = path.open(encoding="utf-8", newline="")
    except OSError as exc:
        raise DecisionInputError(f"{path}: cannot open: {exc.strerror}", "input") from None
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            raise DecisionInputError(f"{path}: empty file, expected a header", "input") from None
        except (csv.Error, UnicodeDecodeError) as exc:
            raise DecisionInputError(f"{path}:1: unreadable header: {exc}", "input") from None
        header = [h.strip() for h in header]
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
            except (csv.Error, UnicodeDecodeError) as exc:
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
            try:
                _add_row(groups, files, start, group_id, cells)
            except DecisionInputError as exc:
                bad(start, group_id or None, exc.message)
    return list(groups.values()), problems


def _add_row(
    groups: dict[str, InputGroup], files: _DocumentFiles, line: int, group_id: str,
    cells: dict[str, str],
) -> None:
    if not group_id:
        raise DecisionInputError("group_id is empty", "group_id")
    group = groups.get(group_id)
    document_cell = cells["document"]
    if group is None:
        if not document_cell.strip():
            raise DecisionInputError("the first row of a group must carry the document",
                                     "document")
        group = InputGroup(group_id, files.resolve(document_cell), line)
    elif document_cell.strip() and files.resolve(document_cell) != group.document:
        raise DecisionInputError(
            f"document differs from the group's first row (line {group.line})", "document"
        )
    schema = _answer_schema(cells["answer_type"], cells["options"])
    try:
        question = Question.model_validate(
            {"id": cells["question_id"].strip(), "text": cells["question"], "answer": schema}
        )
    except ValidationError as exc:
        raise DecisionInputError(_first_error(exc), "question") from None
    if any(q.question.id == question.id for q in group.questions):
        raise DecisionInputError(f"duplicate question_id {question.id!r} in the group",
                                 "question_id")
    gold_text = cells.get("gold")
    gold_text = gold_text if gold_text not in (None, "") else None
    gold = parse_gold(question.answer, gold_text) if gold_text is not None else None
    group.questions.append(ScoredQuestion(line, question, gold_text, gold))
    groups.setdefault(group_id, group)
