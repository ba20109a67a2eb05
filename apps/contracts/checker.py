"""Independent checker: recompute every gold answer from the document TEXT alone.

It does not use the generator's facts or templates. It reads the rendered document the way a
careful human would: it finds the events section by its header, recognises each clause and event
by keywords, pulls numbers and dates out with regular expressions, and applies the rules of
docs/contracts.md. It also recognises the question type from the question's wording. A test runs
it over thousands of generated groups and requires full agreement, so a generator bug (an answer
that does not follow from the text) or an ambiguous wording shows up as a disagreement.

Usage: ``python -m apps.contracts.checker FILE.csv`` checks every row of a batch-scoring CSV.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from datetime import date

from decision.errors import DecisionInputError

MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august",
               "september", "october", "november", "december")
DATE_RE = re.compile(r"\b(" + "|".join(m.capitalize() for m in MONTH_NAMES)
                     + r") (\d{1,2}), (\d{4})\b")
MONTH_WORD_RE = re.compile(r"\b(" + "|".join(m.capitalize() for m in MONTH_NAMES) + r")\b")
DOLLARS_RE = re.compile(r"\$(\d+)")
DAYS_RE = re.compile(r"\b(\d+) days?\b")
EVENTS_HEADER_RE = re.compile(r"^(record of events|facts|what has happened):\s*$", re.I)
NEGATED_ADVISERS_RE = re.compile(r"not permitted|may not|must not|only with its employees|"
                                 r"limited to")

YES, NO, NOT_STATED = "yes", "no", "not stated"


class CheckError(DecisionInputError):
    """The checker cannot read what a question needs from the document."""


@dataclass
class Parsed:
    """What the checker read from one document; ``None`` means "not in the text"."""

    kind: str
    end: date | None = None
    amount: int | None = None
    due_day: int | None = None
    grace: int | None = None
    late_fee: int | None = None
    threshold: int | None = None
    required_notice: int | None = None
    renews_unless_notice: bool | None = None
    outcome_clause: bool = False
    notice_date: date | None = None
    notice_days_stated: int | None = None
    late_count: int | None = None
    years: int | None = None
    advisers: bool | None = None
    return_limit: int | None = None
    report_limit: int | None = None
    damages_clause: bool = False
    events: dict[str, int] = field(default_factory=dict)  # "return"/"report" -> days taken


def _int(digits: str, what: str) -> int:
    """A number of the text; one of more than 4,300 digits (which ``int`` refuses with a
    ValueError) is a CheckError, like any other text the checker cannot read."""
    try:
        return int(digits)
    except ValueError:
        raise CheckError(f"the {what} {digits[:20]}... has too many digits", what) from None


def _dates(line: str) -> list[date]:
    """The dates of a line; one that does not exist ("February 30, 2025") is a CheckError."""
    found = []
    for m, d, y in DATE_RE.findall(line):
        try:
            found.append(date(int(y), MONTH_NAMES.index(m.lower()) + 1, int(d)))
        except ValueError:
            raise CheckError(f"no such date: {m} {d}, {y}", "date") from None
    return found


def _first_int(pattern: re.Pattern[str] | str, line: str, what: str) -> int:
    match = re.search(pattern, line)
    if match is None:
        raise CheckError(f"no {what} in {line!r}", what)
    return _int(match.group(1), what)


def _kind(title: str) -> str:
    low = title.lower()
    if "lease" in low:
        return "lease"
    if "non-disclosure" in low or "confidentiality" in low:
        return "nda"
    if "services" in low:
        return "services"
    raise CheckError(f"unknown agreement title {title!r}", "document")


def parse(document: str) -> Parsed:
    """Read the facts the rules need from the document text."""
    lines = [ln.strip() for ln in document.splitlines() if ln.strip()]
    if not lines:
        raise CheckError("empty document", "document")
    parsed = Parsed(kind=_kind(lines[0]))
    clauses: list[str] = []
    events: list[str] = []
    target = clauses
    for line in lines[1:]:
        if EVENTS_HEADER_RE.match(line):
            target = events
            continue
        target.append(re.sub(r"^\d+\.\s+", "", line))
    if parsed.kind == "nda":
        _parse_nda(parsed, clauses, events)
    else:
        _parse_periodic(parsed, clauses, events)
    return parsed


def _parse_periodic(p: Parsed, clauses: list[str], events: list[str]) -> None:
    for line in clauses:
        low = line.lower()
        if "deposit" in low or "cancellation fee" in low:
            p.outcome_clause = True
        elif "late fee" in low:
            p.grace = _first_int(DAYS_RE, line, "grace period")
            p.late_fee = _first_int(DOLLARS_RE, line, "late fee")
        elif "terminat" in low:
            p.threshold = _first_int(r"(\d+) or more", line, "termination threshold")
        elif "renew" in low:
            p.required_notice = _first_int(DAYS_RE, line, "required notice")
            p.renews_unless_notice = "non-renewal" in low
        elif len(_dates(line)) == 2:
            p.end = max(_dates(line))
        elif "$" in line and "month" in low:
            p.amount = _first_int(DOLLARS_RE, line, "monthly amount")
            p.due_day = _due_day(line)
    for line in events:
        low = line.lower()
        if "notice" in low and _dates(line):
            p.notice_date = _dates(line)[0]
            stated = re.search(r"(\d+) days? before the end of the term", line)
            p.notice_days_stated = _int(stated.group(1), "notice days") if stated else None
        elif "late" in low or "on time" in low:
            p.late_count = len(set(MONTH_WORD_RE.findall(line)))
            stated = re.search(r"\((\d+)\)", line)
            if stated and _int(stated.group(1), "late payment count") != p.late_count:
                raise CheckError(f"stated count disagrees with the months in {line!r}", "document")


def _due_day(line: str) -> int:
    match = re.search(r"\bday (\d+)\b|\b(\d+)(?:st|nd|rd|th)\b", line)
    if match is None:
        raise CheckError(f"no due day in {line!r}", "due day")
    return _int(match.group(1) or match.group(2), "due day")


def _parse_nda(p: Parsed, clauses: list[str], events: list[str]) -> None:
    for line in clauses:
        low = line.lower()
        if "liquidated damages" in low:
            p.damages_clause = True
        elif "adviser" in low:
            p.advisers = NEGATED_ADVISERS_RE.search(low) is None
        elif "unauthorized disclosure" in low:
            p.report_limit = _first_int(DAYS_RE, line, "report deadline")
        elif "return" in low and "materials" in low:
            p.return_limit = _first_int(DAYS_RE, line, "return deadline")
        elif "confidential" in low and "years" in low:
            p.years = _first_int(r"(\d+) years", line, "confidentiality period")
    for line in events:
        low = line.lower()
        name = "report" if "unauthorized disclosure" in low else (
            "return" if "return" in low else None)
        found = _dates(line)
        if name is None or len(found) != 2:
            continue
        taken = (found[1] - found[0]).days
        stated = re.search(r"took (\d+) days?", line)
        if stated and _int(stated.group(1), "days taken") != taken:
            raise CheckError(f"stated days disagree with the dates in {line!r}", "document")
        p.events[name] = taken


# ---------------------------------------------------------------------------------------------
# Question types from wording, tried in order (the first match wins).

QUESTION_PATTERNS: tuple[tuple[str, str], ...] = (
    ("last_on_time_day", r"day of the month.*without (owing )?a late fee"),
    ("due_day", r"day of the month.*due"),
    ("monthly_payment", r"monthly rent|rent does the tenant pay each month|monthly fee does|"
                        r"per month does"),
    ("grace_period_days", r"grace period|before the payment costs a late fee"),
    ("late_fees_owed", r"late fees in total|total of all late fees"),
    ("late_fee_amount", r"late fee for (one|a single) late payment"),
    ("late_fee_due", r"at least one late fee|incurred any late fee"),
    ("termination_threshold", r"how many late payments (give|may)|after how many late payments"),
    ("termination_right", r"terminate"),
    ("late_payment_count", r"how many late payments has|how many payments were late"),
    ("notice_required_days", r"how many days.*(must notice be given|are required)"),
    ("notice_given_days", r"how many days.*did the \w+ give"),
    ("notice_timely", r"notice (given on time|early enough)"),
    ("renews", r"renew for another term|continue for a further year"),
    ("deposit_retained", r"deposit"),
    ("cancellation_fee_due", r"cancellation fee"),
    ("confidentiality_years", r"years.*confidential|confidential.*years|how many years"),
    ("advisers_allowed", r"advisers"),
    ("damages_owed", r"liquidated damages"),
    ("report_deadline_days", r"within how many days of discovery|have to report"),
    ("report_days_taken", r"how many days.*(after discovering|between discovery)"),
    ("report_timely", r"unauthorized disclosure"),
    ("return_deadline_days", r"within how many days of a written request|have to return"),
    ("return_days_taken", r"how many days.*(were the materials returned|take to return)"),
    ("return_timely", r"materials"),
)


def classify_question(text: str) -> str:
    """The question type a question's wording asks about."""
    low = text.lower()
    for qtype, pattern in QUESTION_PATTERNS:
        if re.search(pattern, low):
            return qtype
    raise CheckError(f"unrecognised question {text!r}", "question")


def _need(value: object, what: str) -> object:
    if value is None:
        raise CheckError(f"the document does not state the {what}", what)
    return value


def _yn(value: bool) -> str:
    return YES if value else NO


def answer(parsed: Parsed, qtype: str) -> str | bool | int:
    """The answer to a question type, by the rules, from what the document states."""
    p = parsed
    if p.kind == "nda":
        return _answer_nda(p, qtype)
    if qtype == "monthly_payment":
        return _need(p.amount, "monthly amount")  # type: ignore[return-value]
    if qtype == "due_day":
        return _need(p.due_day, "due day")  # type: ignore[return-value]
    if qtype == "grace_period_days":
        return _need(p.grace, "grace period")  # type: ignore[return-value]
    if qtype == "last_on_time_day":
        return int(_need(p.due_day, "due day")) + int(_need(p.grace, "grace period"))
    if qtype == "late_fee_amount":
        return _need(p.late_fee, "late fee")  # type: ignore[return-value]
    if qtype == "late_payment_count":
        return _need(p.late_count, "late payment record")  # type: ignore[return-value]
    if qtype == "late_fee_due":
        _need(p.late_fee, "late fee")
        return int(_need(p.late_count, "late payment record")) > 0
    if qtype == "late_fees_owed":
        return int(_need(p.late_fee, "late fee")) * int(_need(p.late_count, "record"))
    if qtype == "termination_threshold":
        return _need(p.threshold, "termination threshold")  # type: ignore[return-value]
    if qtype == "termination_right":
        if p.threshold is None:
            return NOT_STATED
        return _yn(int(_need(p.late_count, "late payment record")) >= p.threshold)
    if qtype == "notice_required_days":
        return _need(p.required_notice, "required notice")  # type: ignore[return-value]
    if qtype == "notice_given_days":
        return _notice_given(p)
    if qtype in ("notice_timely", "renews", "deposit_retained", "cancellation_fee_due"):
        outcome_question = qtype in ("deposit_retained", "cancellation_fee_due")
        if p.required_notice is None or (outcome_question and not p.outcome_clause):
            return NOT_STATED
        timely = _notice_given(p) >= p.required_notice
        if qtype == "notice_timely":
            return _yn(timely)
        if qtype == "renews":
            return _yn(not timely if p.renews_unless_notice else timely)
        return _yn(not timely)
    raise CheckError(f"question type {qtype!r} does not apply to a {p.kind} document", "question")


def _notice_given(p: Parsed) -> int:
    """Days between the notice and the end of the term (both dates in the text), or the stated
    count; when both are there they must agree."""
    computed = (p.end - p.notice_date).days if p.end and p.notice_date else None
    if computed is not None and p.notice_days_stated is not None:
        if computed != p.notice_days_stated:
            raise CheckError("stated notice days disagree with the dates", "document")
    value = computed if computed is not None else p.notice_days_stated
    return int(_need(value, "days of notice given"))  # type: ignore[arg-type]


def _answer_nda(p: Parsed, qtype: str) -> str | bool | int:
    if qtype == "confidentiality_years":
        return _need(p.years, "confidentiality period")  # type: ignore[return-value]
    if qtype == "advisers_allowed":
        return _need(p.advisers, "permitted disclosure")  # type: ignore[return-value]
    limits = {"return": p.return_limit, "report": p.report_limit}
    for name, limit in limits.items():
        if qtype == f"{name}_deadline_days":
            return _need(limit, f"{name} deadline")  # type: ignore[return-value]
        if qtype == f"{name}_days_taken":
            return _need(p.events.get(name), f"{name} event")  # type: ignore[return-value]
        if qtype == f"{name}_timely":
            if limit is None:
                return NOT_STATED
            return _yn(int(_need(p.events.get(name), f"{name} event")) <= limit)
    if qtype == "damages_owed":
        stated = [name for name, limit in limits.items() if limit is not None]
        if not p.damages_clause or not stated:
            return NOT_STATED
        return _yn(any(_answer_nda(p, f"{name}_timely") == NO for name in stated))
    raise CheckError(f"question type {qtype!r} does not apply to an NDA", "question")


def check(document: str, question: str) -> tuple[str, str | bool | int]:
    """(question type, answer) for one question about one document."""
    qtype = classify_question(question)
    return qtype, answer(parse(document), qtype)


def main(argv: list[str] | None = None) -> int:
    """Check every row of a batch-scoring CSV; print disagreements; exit 1 if any.

    A CSV that cannot be read, or a document or question the checker cannot read, exits 2 with
    one line naming it (the group and question), as the other contracts CLIs do.
    """
    from apps.contracts.csv_format import read_groups
    from decision.scoring.gold import same_value

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="batch-scoring CSV with gold answers")
    args = parser.parse_args(argv)
    bad = total = no_gold = 0
    where = ""  # the group (and question) being checked, for an error message
    try:
        for group in read_groups(args.csv):
            where = f"group {group.group_id}"
            parsed = parse(group.document)
            for q in group.questions:
                where = f"group {group.group_id}, question {q.id}"
                if q.gold is None:  # an empty gold cell: nothing to compare
                    no_gold += 1
                    continue
                total += 1
                got = answer(parsed, classify_question(q.text))
                if not same_value(got, q.gold):  # != took a gold 0 or 1 for False or True
                    bad += 1
                    print(f"{group.group_id} {q.id}: gold {q.gold!r}, checker {got!r}")
    except DecisionInputError as exc:
        print(f"error: {where + ': ' if where else ''}{exc.message}", file=sys.stderr)
        return 2
    if not total:
        print(f"error: {args.csv} holds no gold answers to check", file=sys.stderr)
        return 2
    plural = "" if no_gold == 1 else "s"
    left_out = f" ({no_gold} question{plural} without gold left out)" if no_gold else ""
    print(f"{total - bad}/{total} gold answers agree with the checker{left_out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
