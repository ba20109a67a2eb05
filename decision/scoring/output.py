"""The predictions file: written one group at a time (flushed), recovered for ``--resume``.

Each group's rows (every question, for every mode scored) are written with one ``write`` and
flushed, so an interrupted run leaves whole groups plus at most one partial group at the end.
``recover`` keeps the complete groups, cuts off the rest (including a partially written last
line) and reports which groups are done, so a resumed run continues where the first stopped.
"""

from __future__ import annotations

import csv
import io
import os
import stat
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from decision.errors import DecisionInputError

try:
    import fcntl
except ImportError:  # Windows: no flock (the project runs on Linux and macOS)
    fcntl = None  # type: ignore[assignment]

OUTPUT_COLUMNS: tuple[str, ...] = (
    "group_id",
    "question_id",
    "mode",
    "answer_type",
    "prediction",
    "confidence",
    "gold",
    "correct",
    "steps",
    "tokens_per_forward",
)


@dataclass(frozen=True)
class PredictionRow:
    """One answered question in one mode. ``correct`` is None when there is no gold."""

    group_id: str
    question_id: str
    mode: str
    answer_type: str
    prediction: str
    confidence: float
    gold: str | None
    correct: bool | None
    steps: int
    tokens_per_forward: float

    def cells(self) -> list[str]:
        return [
            self.group_id,
            self.question_id,
            self.mode,
            self.answer_type,
            self.prediction,
            f"{self.confidence:.6f}",
            "" if self.gold is None else self.gold,
            "" if self.correct is None else str(int(self.correct)),
            str(self.steps),
            f"{self.tokens_per_forward:.4f}",
        ]

    @classmethod
    def from_cells(cls, cells: Mapping[str, str]) -> PredictionRow:
        """The row of a predictions file's cells; ``ValueError`` naming the column of a cell
        this tool never writes (a hand-edited file: a ``correct`` of ``yes`` was read as wrong,
        a ``confidence`` of ``high`` was a traceback once the run was over)."""

        def number(name: str, kind: type[int] | type[float]) -> Any:
            try:
                return kind(cells[name])
            except ValueError:
                raise ValueError(f"{name} {cells[name]!r} is not a number") from None

        if cells["correct"] not in ("", "0", "1"):
            raise ValueError(f"correct {cells['correct']!r} is not 1, 0 or empty")
        return cls(
            group_id=cells["group_id"],
            question_id=cells["question_id"],
            mode=cells["mode"],
            answer_type=cells["answer_type"],
            prediction=cells["prediction"],
            confidence=number("confidence", float),
            gold=cells["gold"] if cells["gold"] != "" else None,
            correct=None if cells["correct"] == "" else cells["correct"] == "1",
            steps=number("steps", int),
            tokens_per_forward=number("tokens_per_forward", float),
        )


def _encode_rows(rows: Iterable[list[str]]) -> str:
    buffer = io.StringIO()
    plain = csv.writer(buffer, lineterminator="\n")
    # The writer quotes a cell holding "\n" (its line terminator) but not a lone "\r", which
    # csv readers take for the end of a row: a row with one has every cell quoted.
    quoted = csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_ALL)
    for row in rows:
        (quoted if any("\r" in cell for cell in row) else plain).writerow(row)
    return buffer.getvalue()


class PredictionWriter:
    """Appends whole groups to the predictions file, flushing after each."""

    def __init__(self, path: Path, *, append: bool) -> None:
        self.path = path
        try:
            fresh = not append or not path.exists() or path.stat().st_size == 0
            self._file: IO[str] = path.open("w" if fresh else "a", encoding="utf-8", newline="")
        except OSError as exc:
            raise DecisionInputError(f"{path}: cannot write: {exc.strerror}", "out") from None
        if fresh:
            self._file.write(_encode_rows([list(OUTPUT_COLUMNS)]))
            self._file.flush()

    def write_group(self, rows: list[PredictionRow]) -> None:
        # One write per group: a crash leaves whole groups and at most one partial group.
        try:
            self._file.write(_encode_rows(row.cells() for row in rows))
            self._file.flush()
        except OSError as exc:  # a full disk: the error names the file (a flush names none)
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None

    def close(self) -> None:
        try:
            self._file.close()
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None

    def __enter__(self) -> PredictionWriter:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        try:
            self.close()
        except OSError:
            if kind is None:
                raise
            # the write that failed is the error to report, not this retry of its flush


@contextmanager
def locked(path: Path) -> Iterator[str | None]:
    """Hold the predictions file (created empty if missing) locked for one run, or refuse it
    while another run holds it: two runs on one file (a ``--resume`` started while the first
    still ran) both wrote it, and it held groups twice or one run's rows over the other's. The
    lock (``flock``) ends with the run, and with its process, however that dies. Yields None, or
    the warning to show where the file system takes no lock (no lock daemon, some FUSE file
    systems): the run goes on unguarded. Opened for writing, as the run writes it anyway: over
    NFS ``flock`` is a lock of the server's, and an exclusive one needs a file open for
    writing (else EBADF)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise DecisionInputError(f"{path}: cannot write: {exc.strerror}", "out") from None
    warning = None
    try:
        if fcntl is not None and stat.S_ISREG(os.fstat(fd).st_mode):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise DecisionInputError(
                    f"{path}: another run is writing it (a decision score on it has not ended); "
                    "wait for it to end, or choose another --out", "out") from None
            except OSError as exc:  # ENOLCK, EOPNOTSUPP...: no lock here, not another run
                warning = (f"warning: cannot lock {path} ({exc.strerror}): a second run "
                           "started on it would not be refused")
        yield warning
    finally:
        os.close(fd)  # releases the lock


def read_predictions(path: Path) -> list[PredictionRow]:
    """Every row of a complete predictions file."""
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != OUTPUT_COLUMNS:
            raise DecisionInputError(
                f"{path}: not a predictions file (header {reader.fieldnames})", "out"
            )
        rows: list[PredictionRow] = []
        start = reader.line_num + 1  # the line a row starts on
        for cells in reader:
            rows.append(_parsed(path, start, cells))
            start = reader.line_num + 1
        return rows


def _parsed(path: Path, line: int, cells: Mapping[Any, Any]) -> PredictionRow:
    """``PredictionRow.from_cells``, or a ``DecisionInputError`` naming the file and ``line``
    (where the row starts)."""
    try:
        if len(cells) != len(OUTPUT_COLUMNS) or None in cells.values():  # DictReader's fill
            raise ValueError(f"a row of {len(OUTPUT_COLUMNS)} cells expected")
        return PredictionRow.from_cells(cells)
    except ValueError as exc:
        raise DecisionInputError(f"{path}:{line}: not a predictions row: {exc}", "out") from None


def beside(out_path: Path, what: str) -> Path:
    """A file kept beside the predictions: ``OUT.csv`` -> ``OUT.<what>``; any other name keeps
    all of itself and adds ``-<what>`` (``preds.v1`` -> ``preds.v1-summary.json``).

    So two different ``--out`` paths never share one (stripping any last suffix made
    ``preds.v1``, ``preds.v2`` and ``preds`` all write ``preds.summary.*``, like ``preds.csv``):
    dropping ``.csv`` keeps ``.csv`` names apart, and the ``-`` of the other names keeps them
    apart from those.
    """
    name = out_path.name
    if name.endswith(".csv") and len(name) > len(".csv"):
        return out_path.with_name(f"{name[: -len('.csv')]}.{what}")
    return out_path.with_name(f"{name}-{what}")


def recover(
    path: Path, expected_rows: Mapping[str, int], modes: Collection[str] | None = None,
    questions: Mapping[str, Collection[str]] | None = None,
) -> set[str]:
    """Keep the complete groups of an interrupted predictions file; return their ids.

    ``expected_rows`` has every group of the input: a group is complete when its consecutive
    rows number ``expected_rows[group_id]`` (questions x modes). The file is truncated just
    after the last complete group that precedes anything incomplete, which also discards a
    partial last line. A file holding a row that this run would not write is refused untouched:
    a group not in ``expected_rows`` or a question not in ``questions[group_id]`` (predictions
    of another input: cutting them away would lose them), or, with ``modes`` (the run's modes),
    a row of another mode (resuming would mix modes or cut away the other mode's predictions).
    """
    if not path.exists():
        return set()
    foreign = DecisionInputError(
        f"{path}: exists but is not a predictions file of this tool; refusing to resume "
        "into it (remove it or choose another --out)",
        "out",
    )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DecisionInputError(f"{path}: cannot read: {exc.strerror}", "out") from None
    end = data.rfind(b"\n") + 1  # a last line without its newline was cut by the interruption
    # Split at "\n" only (what the writer ends rows with): str.splitlines also splits at \x0c,
    # \x1c-\x1e, \x85 and U+2028/9, which the csv writer leaves unquoted inside a cell.
    try:
        lines = [raw.decode("utf-8") + "\n" for raw in data[:end].split(b"\n")[:-1]]
    except UnicodeDecodeError:
        raise foreign from None
    if not lines:
        path.write_bytes(b"")
        return set()
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode("utf-8")))
    reader = csv.reader(iter(lines))
    header = next(reader, None)
    if header is None or tuple(header) != OUTPUT_COLUMNS:
        raise foreign
    # the whole rows, read once for the checks below (a partial row is cut off further down);
    # one with a cell this tool never writes (a hand-edited file) is refused by its line
    rows: list[list[str]] = []
    body, start = csv.reader(iter(lines[1:])), 2
    for r in body:
        if len(r) == len(OUTPUT_COLUMNS):
            try:
                _parsed(path, start, dict(zip(OUTPUT_COLUMNS, r, strict=True)))
            except DecisionInputError as exc:
                raise DecisionInputError(f"{exc.message}; refusing to resume into it (fix "
                                         "or remove it, or choose another --out)", "out") from None
            rows.append(r)
        start = body.line_num + 2
    if modes is not None:
        mode_at = OUTPUT_COLUMNS.index("mode")
        other = {r[mode_at] for r in rows} - set(modes)
        if other:
            raise DecisionInputError(
                f"{path}: holds {', '.join(sorted(other))} predictions, and this run scores "
                f"{', '.join(modes)}; refusing to resume into it (resume with the --mode it was "
                "written with, or choose another --out)",
                "out",
            )
    group_at, question_at = OUTPUT_COLUMNS.index("group_id"), OUTPUT_COLUMNS.index("question_id")
    if modes is not None:
        _refuse_groups_missing_a_mode(path, rows, expected_rows, tuple(modes))
    for r in rows:
        group_id, question_id = r[group_at], r[question_at]
        if group_id not in expected_rows:
            unknown = f"group {group_id!r}"
        elif questions is not None and question_id not in questions.get(group_id, ()):
            unknown = f"question {question_id!r} of group {group_id!r}"
        else:
            continue
        raise DecisionInputError(
            f"{path}: holds predictions for {unknown}, which this input does not have: they "
            "were scored from another input; refusing to resume into it (resume with that "
            "input, or choose another --out)",
            "out",
        )
    keep = offsets[reader.line_num]  # end of the header
    done: set[str] = set()
    current: str | None = None
    count = 0
    for record in reader:
        group_id = record[0] if record else ""
        if group_id != current:
            if current is not None and current not in done:
                break  # an incomplete group: everything from it on is redone
            current, count = group_id, 0
        count += 1
        if len(record) != len(OUTPUT_COLUMNS) or group_id in done:
            break
        if count == expected_rows.get(group_id, -1):
            done.add(group_id)
            keep = offsets[reader.line_num]
    with path.open("r+b") as handle:
        handle.truncate(keep)
    return done


def _refuse_groups_missing_a_mode(
    path: Path, rows: list[list[str]], expected_rows: Mapping[str, int], modes: tuple[str, ...]
) -> None:
    """Refuse a file with a whole group written in fewer modes than this run scores (a joint
    run resumed with ``--mode both``): counted against this run's rows that group looks
    incomplete, and everything from it on would be cut away and decided again. (A file of one
    such group is not refused: that group is all it can lose.)"""
    group_at, mode_at = OUTPUT_COLUMNS.index("group_id"), OUTPUT_COLUMNS.index("mode")
    by_group: dict[str, list[str]] = {}
    for r in rows:
        by_group.setdefault(r[group_at], []).append(r[mode_at])
    # the last group may be a torn write (its first mode's rows only): it is no evidence
    for group_id, group_modes in list(by_group.items())[:-1]:
        present = set(group_modes)
        questions = expected_rows.get(group_id, 0) // max(len(modes), 1)
        if present < set(modes) and len(group_modes) == questions * len(present):
            missing = ", ".join(m for m in modes if m not in present)
            raise DecisionInputError(
                f"{path}: holds {', '.join(sorted(present))} predictions only (group "
                f"{group_id!r} has no {missing} rows), and this run scores {', '.join(modes)}; "
                "refusing to resume into it, which would decide those groups again and cut "
                "their predictions away (resume with the --mode it was written with, or "
                "choose another --out)",
                "out",
            )
