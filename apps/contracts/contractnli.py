"""ContractNLI as batch-scoring groups: real agreements, judgments we did not write.

ContractNLI (Yuta Koreeda and Christopher D. Manning, "ContractNLI: A Dataset for Document-level
Natural Language Inference for Contracts", Findings of EMNLP 2021; CC BY 4.0) judges real
non-disclosure agreements against 17 fixed hypotheses as Entailment, Contradiction or
NotMentioned. Each agreement becomes groups of at most 8 questions (the joint block's limit),
each question a hypothesis with a ``choice`` among "entailed", "contradicted" and "not
mentioned"; the gold is the dataset's label. Documents are written once, as files beside the
CSV, and referenced with ``@docs/NAME.txt``.

    python -m apps.contracts.contractnli ../shared/data/contract-nli/dev.json --out nli/dev.csv
    decision score nli/dev.csv --out nli/predictions.csv --mode both

The shipped model was trained only on generated contracts (apps.contracts.generator), so this
measures how far that carries to real legal text; see docs/contracts.md for the numbers.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apps.contracts.csv_format import HEADER, MAX_QUESTIONS, schema_to_cells
from decision.errors import DecisionInputError

LABELS = {
    "Entailment": "entailed", "Contradiction": "contradicted", "NotMentioned": "not mentioned",
}
OPTIONS = ["entailed", "contradicted", "not mentioned"]
ANSWER: dict[str, Any] = {"type": "choice", "options": OPTIONS}


@dataclass(frozen=True)
class NliQuestion:
    id: str  # the hypothesis key, e.g. "nda-11"
    text: str
    gold: str


@dataclass(frozen=True)
class NliGroup:
    group_id: str
    document_id: str
    document: str
    questions: list[NliQuestion]


def question_text(hypothesis: str) -> str:
    """The question asked for one hypothesis."""
    return f"Is this entailed by the agreement, contradicted, or not mentioned: {hypothesis}"


def _chunks(items: list[Any], limit: int) -> list[list[Any]]:
    """``items`` in consecutive groups of at most ``limit``, sizes as equal as possible."""
    if not items:
        return []
    count = math.ceil(len(items) / limit)
    size, extra = divmod(len(items), count)
    out, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def load_groups(path: str | Path, per_group: int = MAX_QUESTIONS) -> list[NliGroup]:
    """Read ContractNLI's JSON (``documents``, ``labels``) into groups of at most ``per_group``
    hypotheses per agreement, in the file's order (hypotheses sorted by their number)."""
    return groups_from(read_file(path), per_group)


def read_file(path: str | Path) -> dict[str, Any]:
    """A ContractNLI JSON file, checked to hold ``documents`` and ``labels``."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"), object_pairs_hook=_no_repeats)
    except (OSError, ValueError) as exc:
        raise DecisionInputError(f"{path}: not a ContractNLI JSON file ({exc})", "input") from exc
    except RecursionError:  # json.loads on arrays or objects nested thousands deep
        raise DecisionInputError(f"{path}: not a ContractNLI JSON file (nested too deeply)",
                                 "input") from None
    if not isinstance(data, dict) or not {"labels", "documents"} <= set(data):
        raise DecisionInputError(f"{path}: not a ContractNLI JSON file (no 'documents' and "
                                 "'labels')", "input")
    labels, documents = data["labels"], data["documents"]
    if not isinstance(documents, list):
        raise DecisionInputError(f"{path}: not a ContractNLI JSON file ('documents' is not a "
                                 "list)", "input")
    if not isinstance(labels, dict):
        raise DecisionInputError(f"{path}: not a ContractNLI JSON file ('labels' is not an "
                                 "object)", "input")
    for key, label in labels.items():
        if not isinstance(label, dict) or not isinstance(label.get("hypothesis"), str):
            raise DecisionInputError(f"{path}: label {key!r} has no hypothesis text", "input")
        # The key is the question_id, which the scoring reader strips and needs non-empty.
        if not key.strip() or key != key.strip():
            raise DecisionInputError(f"{path}: label {key!r} is not a usable question id (empty, "
                                     "or with spaces around it)", "input")
        surrogate = _lone_surrogate(label["hypothesis"])
        if surrogate:
            raise DecisionInputError(f"{path}: label {key!r}: the hypothesis {surrogate}", "input")
    if not documents:  # wrote a CSV of only its header, which the scoring reader refuses
        raise DecisionInputError(f"{path}: holds no documents", "input")
    return data


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice (json.loads keeps the last one silently: a
    hypothesis annotated twice had one of its labels dropped)."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"the key {key!r} appears twice in one object")
        data[key] = value
    return data


def _lone_surrogate(text: str) -> str | None:
    """Why ``text`` cannot be written as UTF-8 (JSON's "\\ud800" escape reads as a lone
    surrogate), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"holds a lone surrogate ({text[exc.start]!r} at offset {exc.start}), which "
                "UTF-8 cannot write")
    return None


def groups_from(data: dict[str, Any], per_group: int = MAX_QUESTIONS) -> list[NliGroup]:
    """:func:`load_groups` on a file already read by :func:`read_file`."""
    if not 1 <= per_group <= MAX_QUESTIONS:
        raise DecisionInputError(f"per_group must be 1..{MAX_QUESTIONS}", "per_group")
    labels, documents = data["labels"], data["documents"]
    order = sorted(labels, key=_hypothesis_number)
    groups: list[NliGroup] = []
    first_of: dict[str, int] = {}  # document id -> index of the document that has it
    for index, doc in enumerate(documents):
        questions = _document_questions(doc, index, labels, order)
        document_id, where = str(doc["id"]), f"documents[{index}] (id {_shown(doc['id'])})"
        # null, true or 1.5 became the agreement "None", "True" or "1.5" without a word
        if isinstance(doc["id"], bool) or not isinstance(doc["id"], (str, int)):
            raise DecisionInputError(f"{where}: the id is not a string or an integer", where)
        # The id names the agreement's file (docs/ID.txt) and its groups (ID-1, ID-2...): a
        # repeated id wrote only the first agreement's text and two groups of one name, and an id
        # with a path in it wrote outside docs/.
        if not _SAFE_ID.fullmatch(document_id):
            raise DecisionInputError(f"{where}: the id is not a plain file name (letters, digits, "
                                     "'.', '_', '-')", where)
        if document_id in first_of:
            raise DecisionInputError(f"{where}: the id repeats that of "
                                     f"documents[{first_of[document_id]}]", where)
        first_of[document_id] = index
        for i, chunk in enumerate(_chunks(questions, per_group)):
            groups.append(NliGroup(f"{document_id}-{i + 1}", document_id, doc["text"], chunk))
    return groups


_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _shown(doc_id: Any) -> str:
    """A document id as error messages show it: as is for a string or an integer, else as JSON
    (``null``, ``true``, ``1.5``)."""
    if isinstance(doc_id, (str, int)) and not isinstance(doc_id, bool):
        return str(doc_id)
    try:
        return json.dumps(doc_id, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(doc_id)


def _hypothesis_number(key: str) -> tuple[int, int]:
    """The sort key of a hypothesis: the number its key holds (``nda-11``: 11); a key of over
    4,300 digits, which int() refuses, after all others."""
    try:
        return 0, int(re.sub(r"\D", "", key) or 0)
    except ValueError:
        return 1, 0


def _document_questions(doc: Any, index: int, labels: dict[str, Any],
                        order: list[str]) -> list[NliQuestion]:
    """One agreement's hypotheses with their labels; a malformed document (a missing key, a
    label other than Entailment/Contradiction/NotMentioned) is one DecisionInputError naming it."""
    where = f"documents[{index}]"
    try:
        where = f"documents[{index}] (id {_shown(doc['id'])})"
        if not isinstance(doc["text"], str):
            raise TypeError("text is not a string")
        if not doc["text"].strip():  # docs/ID.txt would be empty: the CSV would not read back
            raise DecisionInputError(f"{where}: the text is empty", where)
        surrogate = _lone_surrogate(doc["text"])
        if surrogate:
            raise DecisionInputError(f"{where}: the text {surrogate}", where)
        annotations = doc["annotation_sets"][0]["annotations"]
        unknown = sorted(set(annotations) - set(labels))
        if unknown:  # were dropped without a word
            raise DecisionInputError(f"{where}: annotates {', '.join(unknown)}, which the "
                                     "file's labels do not define", where)
        questions = []
        for key in (k for k in order if k in annotations):
            choice = annotations[key]["choice"]
            if choice not in LABELS:
                raise DecisionInputError(f"{where}: label {choice!r} of {key} is not one of "
                                         f"{', '.join(LABELS)}", where)
            questions.append(NliQuestion(key, question_text(labels[key]["hypothesis"]),
                                         LABELS[choice]))
    except (KeyError, IndexError, TypeError) as exc:
        raise DecisionInputError(f"{where}: not a ContractNLI document ({type(exc).__name__}: "
                                 f"{exc})", where) from exc
    return questions


def write_csv(groups: list[NliGroup], out: str | Path) -> tuple[int, int]:
    """Write the CSV and one ``docs/ID.txt`` per agreement beside it; returns (rows, documents)."""
    out = Path(out)
    docs = out.parent / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    written: set[str] = set()
    rows = 0
    answer_type, options = schema_to_cells(ANSWER)
    with out.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        for group in groups:
            name = f"{group.document_id}.txt"
            if group.document_id not in written:
                (docs / name).write_text(group.document, encoding="utf-8")
                written.add(group.document_id)
            for q in group.questions:
                writer.writerow([group.group_id, f"@docs/{name}", q.id, q.text, answer_type,
                                 options, q.gold])
                rows += 1
    return rows, len(written)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="ContractNLI JSON to a batch-scoring CSV.")
    parser.add_argument("input",
                        help="ContractNLI JSON (e.g. ../shared/data/contract-nli/dev.json)")
    parser.add_argument("--out", required=True,
                        help="CSV to write (documents go to docs/ beside it)")
    parser.add_argument("--per-group", type=int, default=MAX_QUESTIONS,
                        help=f"hypotheses per group, 1..{MAX_QUESTIONS} (default {MAX_QUESTIONS})")
    args = parser.parse_args(argv)
    try:
        data = read_file(args.input)
        try:
            groups = groups_from(data, args.per_group)
        except DecisionInputError as exc:  # names the document or label: add the file
            raise DecisionInputError(f"{args.input}: {exc}", exc.field) from exc
        if not groups:  # every document without annotations: a CSV of only its header
            raise DecisionInputError(f"{args.input}: no document annotates any hypothesis",
                                     "input")
        rows, documents = write_csv(groups, args.out)
    except DecisionInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {rows} questions in {len(groups)} groups over {documents} agreements to "
          f"{args.out}", file=sys.stderr)
    pairs = len(data["documents"]) * len(data["labels"])
    if pairs > rows:
        print(f"note: {pairs - rows} of the {pairs} agreement-hypothesis pairs have no "
              "annotation and are left out", file=sys.stderr)
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
