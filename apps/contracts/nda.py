"""The one-way non-disclosure agreement (NDA).

Clauses (``*`` optional): parties and effective date, confidentiality period (years), permitted
disclosure (whether professional advisers may receive the information), return of materials*
(within D days of a written request), breach notice* (report an unauthorized disclosure within
H days of discovering it), liquidated damages* (owed for a late return or a late report).
Events: a written request and the return of materials; a discovered disclosure and its report,
each with both dates in one month so the day count is a subtraction of day numbers.

Rules (see docs/contracts.md):
- return timely  <=>  days taken <= D (absent clause: "not stated"); same for the breach report;
- damages owed  <=>  some obligation the agreement states was met late (absent damages clause, or
  neither obligation stated: "not stated").
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, timedelta

from apps.contracts import text
from apps.contracts.types import CHOICE_NO, CHOICE_YES, NOT_STATED, RuleAnswer

NDA = "nda"

RETURN_DAYS = (3, 5, 7, 10, 14, 15, 20)
REPORT_DAYS = (1, 2, 3, 5, 7, 10)
PURPOSES = (
    "a possible joint venture", "a software licence", "a supply contract", "an acquisition",
    "a research collaboration", "a distribution deal",
)


@dataclass(frozen=True)
class DeadlineEvent:
    """Something that started a deadline (``start``) and when the obligation was met."""

    start: date
    days_taken: int

    @property
    def done(self) -> date:
        return self.start + timedelta(days=self.days_taken)


@dataclass(frozen=True)
class NdaFacts:
    """Everything an NDA states, before wording is chosen."""

    discloser: str
    recipient: str
    effective: date
    purpose: str
    years: int
    advisers_allowed: bool
    return_days: int | None
    return_event: DeadlineEvent | None
    report_days: int | None
    report_event: DeadlineEvent | None
    damages: int | None


def _event(rng: random.Random, after: date, limit: int | None, late: bool) -> DeadlineEvent:
    """An event in one month after ``after``; met within ``limit`` days unless ``late``."""
    if limit is None:
        taken = rng.randint(0, 20)
    elif late:
        taken = rng.randint(limit + 1, min(limit + 8, 27))  # 27: stay inside the month
    else:
        taken = rng.randint(0 if limit <= 2 else 1, limit)
    # the first day of the month two months after ``after`` (months counted from 0 here)
    month_start = date(after.year + (after.month + 1) // 12, (after.month + 1) % 12 + 1, 1)
    start = month_start + timedelta(days=rng.randint(0, 27 - taken))
    return DeadlineEvent(start, taken)


def sample(rng: random.Random) -> NdaFacts:
    """Draw the facts of one NDA; lateness is drawn so that the damages answer stays balanced."""
    effective = date(rng.randint(2023, 2026), rng.randint(1, 12), rng.randint(1, 28))
    return_days = rng.choice(RETURN_DAYS) if rng.random() < 0.75 else None
    report_days = rng.choice(REPORT_DAYS) if rng.random() < 0.75 else None
    damages = rng.randrange(1000, 50000, 500) if rng.random() < 0.75 else None
    # with both obligations stated, each is late with p = 0.3, so "some is late" has p = 0.51
    p_late = 0.3 if return_days is not None and report_days is not None else 0.5
    return_event = report_event = None
    if return_days is not None or rng.random() < 0.5:
        return_event = _event(rng, effective, return_days, rng.random() < p_late)
    if report_days is not None or rng.random() < 0.5:
        report_event = _event(rng, effective, report_days, rng.random() < p_late)
    return NdaFacts(
        discloser=text.company(rng), recipient=text.company(rng), effective=effective,
        purpose=rng.choice(PURPOSES), years=rng.randint(1, 7),
        advisers_allowed=rng.random() < 0.5, return_days=return_days, return_event=return_event,
        report_days=report_days, report_event=report_event, damages=damages,
    )


def _yes_no(value: bool) -> str:
    return CHOICE_YES if value else CHOICE_NO


def answers(f: NdaFacts) -> dict[str, RuleAnswer]:
    """Gold answer of every question type the document can answer (the generator's rules)."""
    out: dict[str, RuleAnswer] = {}

    def put(qtype: str, gold: str | bool | int, *needs: str) -> None:
        out[qtype] = RuleAnswer(gold, frozenset(needs))

    put("confidentiality_years", f.years, "confidentiality")
    put("advisers_allowed", f.advisers_allowed, "disclosure")
    late: list[bool] = []
    needs: list[str] = []
    for name, days, event in (("return", f.return_days, f.return_event),
                              ("report", f.report_days, f.report_event)):
        if event is not None:
            put(f"{name}_days_taken", event.days_taken, f"{name}_event")
        if days is None:
            put(f"{name}_timely", NOT_STATED)
            continue
        assert event is not None
        put(f"{name}_deadline_days", days, name)
        timely = event.days_taken <= days
        put(f"{name}_timely", _yes_no(timely), name, f"{name}_event")
        late.append(not timely)
        needs += [name, f"{name}_event"]
    if f.damages is None:
        put("damages_owed", NOT_STATED)
    elif not late:
        put("damages_owed", NOT_STATED, "damages")
    else:
        put("damages_owed", _yes_no(any(late)), "damages", *needs)
    return out


# ---------------------------------------------------------------------------------------------
# Wording: three or more per clause.

TITLES = ("NON-DISCLOSURE AGREEMENT", "Confidentiality Agreement",
          "One-Way Non-Disclosure Agreement")
PARTIES = (
    'This Agreement is made on {effective} between {discloser} (the "Disclosing Party") and '
    '{recipient} (the "Receiving Party").',
    'Effective {effective}, {discloser} (the "Disclosing Party") will share confidential '
    'information with {recipient} (the "Receiving Party").',
    "Disclosing Party: {discloser}. Receiving Party: {recipient}. Effective date: {effective}.",
)
PURPOSE = (
    "The information is shared only to evaluate {purpose}.",
    "The purpose of the disclosure is to discuss {purpose}.",
    "The parties are exploring {purpose}.",
)
CONFIDENTIALITY = (
    "The Receiving Party shall keep the information confidential for {years} years after the "
    "effective date.",
    "Confidentiality obligations last {years} years from the effective date.",
    "The duty of confidentiality ends {years} years after the effective date.",
)
ADVISERS_ALLOWED = (
    "The Receiving Party may share the information with its employees and professional advisers "
    "who need to know it.",
    "Disclosure to the Receiving Party's employees and professional advisers is permitted on a "
    "need-to-know basis.",
    "The Receiving Party may disclose the information to its professional advisers as well as its "
    "employees.",
)
ADVISERS_FORBIDDEN = (
    "The Receiving Party may share the information only with its employees; disclosure to "
    "advisers is not permitted.",
    "Disclosure is limited to the Receiving Party's employees; professional advisers may not "
    "receive the information.",
    "The Receiving Party must not disclose the information to any adviser; only its employees may "
    "receive it.",
)
RETURN = (
    "Within {days} days of a written request, the Receiving Party shall return all confidential "
    "materials.",
    "The Receiving Party must return all materials no later than {days} days after the Disclosing "
    "Party asks for them in writing.",
    "Return of materials: within {days} days from a written request.",
)
REPORT = (
    "The Receiving Party shall notify the Disclosing Party within {days} days of discovering any "
    "unauthorized disclosure.",
    "Any unauthorized disclosure must be reported to the Disclosing Party no later than {days} "
    "days after it is discovered.",
    "Breach notice: the Receiving Party reports an unauthorized disclosure within {days} days of "
    "discovery.",
)
DAMAGES = (
    "For each failure to return materials or to report an unauthorized disclosure on time, the "
    "Receiving Party shall pay ${amount} as liquidated damages.",
    "Liquidated damages of ${amount} apply to every late return of materials and every late "
    "breach notice.",
    "The Receiving Party owes ${amount} in liquidated damages whenever it returns materials late "
    "or reports a breach late.",
)
DISTRACTORS = (
    "Nothing in this Agreement grants the Receiving Party any licence to the information.",
    "This Agreement is governed by the laws of the state where the Disclosing Party is located.",
    "Information that is already public is not confidential information.",
    "Neither party is obliged to enter into any further agreement.",
)
EVENTS_HEADERS = ("Record of events:", "Facts:", "What has happened:")
RETURN_EVENT = (
    "On {start}, the Disclosing Party requested the return of all materials in writing; the "
    "Receiving Party returned them on {done}.",
    "The Disclosing Party asked in writing for the materials back on {start}. They were returned "
    "on {done}.",
    "Written request for return of materials: {start}. Materials returned: {done}.",
)
REPORT_EVENT = (
    "On {start}, the Receiving Party discovered an unauthorized disclosure and notified the "
    "Disclosing Party on {done}.",
    "An unauthorized disclosure was discovered on {start}; the Disclosing Party was told on "
    "{done}.",
    "Unauthorized disclosure discovered: {start}. Disclosing Party notified: {done}.",
)
EVENT_COUNT = " That took {days} days."


def render(f: NdaFacts, rng: random.Random, level: int, needed: frozenset[str]) -> str:
    """The document text; level 1 shows only the clauses the questions need."""
    full = level >= 2
    clauses = [rng.choice(PARTIES).format(effective=text.format_date(f.effective),
                                          discloser=f.discloser, recipient=f.recipient)]
    if full:
        clauses.append(rng.choice(PURPOSE).format(purpose=f.purpose))
    if full or "confidentiality" in needed:
        clauses.append(rng.choice(CONFIDENTIALITY).format(years=f.years))
    if full or "disclosure" in needed:
        wordings = ADVISERS_ALLOWED if f.advisers_allowed else ADVISERS_FORBIDDEN
        clauses.append(rng.choice(wordings))
    if f.return_days is not None and (full or "return" in needed):
        clauses.append(rng.choice(RETURN).format(days=f.return_days))
    if f.report_days is not None and (full or "report" in needed):
        clauses.append(rng.choice(REPORT).format(days=f.report_days))
    if f.damages is not None and (full or "damages" in needed):
        clauses.append(rng.choice(DAMAGES).format(amount=f.damages))
    if full:
        for extra in rng.sample(DISTRACTORS, rng.randint(1, 3)):
            clauses.insert(rng.randint(2, len(clauses)), extra)
        if rng.random() < 0.5:
            clauses = [f"{i}. {c}" for i, c in enumerate(clauses, start=1)]

    events: list[str] = []
    for name, event, wordings in (("return", f.return_event, RETURN_EVENT),
                                  ("report", f.report_event, REPORT_EVENT)):
        if event is None or not (full or f"{name}_event" in needed):
            continue
        line = rng.choice(wordings).format(start=text.format_date(event.start),
                                           done=text.format_date(event.done))
        if not full or rng.random() < 0.4:
            line += EVENT_COUNT.format(days=event.days_taken)
        events.append(line)
    rng.shuffle(events)
    parts = [rng.choice(TITLES), "\n".join(clauses)]
    if events:
        parts.append(rng.choice(EVENTS_HEADERS) + "\n" + "\n".join(events))
    return text.fix_plurals("\n\n".join(parts))
