"""Agreements with a monthly payment: the residential lease and the services agreement.

Both share the same mechanics, so they share this module; only the wording and the roles differ.

Clauses (``*`` optional): parties, term, payment (amount, due day), late fee* (grace period, fee),
termination for late payment* (threshold), renewal* (required notice in days; renews unless notice
of non-renewal, or renews only on notice of renewal), outcome* (lease: security deposit kept when
the notice under the renewal clause is late; services: cancellation fee owed when it is late).
Events: the payer's notice (date in the last month of the term), the record of late payments.

Rules (see docs/contracts.md):
- notice timely  <=>  days of notice given >= required days (absent renewal clause: "not stated");
- renews  <=>  (non-renewal clause and notice late) or (renewal-on-notice clause and notice timely);
- deposit kept / cancellation fee owed  <=>  notice late (absent outcome or renewal clause:
  "not stated");
- late fee due  <=>  late payments > 0; late fees owed = late payments x fee;
- termination right  <=>  late payments >= threshold (absent clause: "not stated");
- last day to pay without a late fee = due day + grace period.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, timedelta

from apps.contracts import text
from apps.contracts.types import CHOICE_NO, CHOICE_YES, NOT_STATED, RuleAnswer

LEASE = "lease"
SERVICES = "services"

NOTICE_DAYS = (5, 7, 10, 14, 15, 20, 21, 25)
GRACE_DAYS = (2, 3, 5, 7, 10)
LATE_FEES = (20, 25, 30, 40, 50, 75, 100)
SERVICES_OFFERED = (
    "website maintenance", "bookkeeping services", "office cleaning", "IT support",
    "payroll processing", "marketing consulting", "software development", "security monitoring",
)


@dataclass(frozen=True)
class Renewal:
    """Renewal clause: ``opt_out`` renews unless notice of non-renewal is timely; otherwise the
    agreement renews only on a timely notice of renewal."""

    required_days: int
    opt_out: bool


@dataclass(frozen=True)
class PeriodicFacts:
    """Everything a lease or services agreement states, before wording is chosen."""

    kind: str
    payer: str
    payee: str
    subject: str  # lease: the premises' address; services: the services provided
    start: date
    end: date
    amount: int
    due_day: int
    late_fee: tuple[int, int] | None  # (grace days, fee)
    termination_threshold: int | None
    renewal: Renewal | None
    notice_days: int | None  # days of notice the payer gave before the end date
    notice_of_renewal: bool  # what the notice says: renewal (True) or non-renewal (False)
    outcome_amount: int | None  # deposit (lease) or cancellation fee (services)
    late_months: tuple[int, ...]  # months (1-12) with a late payment, in term order

    @property
    def notice_date(self) -> date | None:
        """The date the payer's notice was given."""
        if self.notice_days is None:
            return None
        return self.end - timedelta(days=self.notice_days)


def sample(rng: random.Random, kind: str) -> PeriodicFacts:
    """Draw the facts of one agreement; derived outcomes are drawn balanced, then the numbers."""
    year = rng.randint(2024, 2027)
    end_month = rng.randint(1, 12)
    end = date(year, end_month, text.last_day(year, end_month))
    # a one-year term: from the first day of the month after the end month, a year earlier
    start = date(year - 1, end_month + 1, 1) if end_month < 12 else date(year, 1, 1)
    if kind == LEASE:
        payer, payee, subject = text.person(rng), text.person(rng), text.address(rng)
        amount = rng.randrange(800, 3500, 25)
        outcome_amount = rng.randrange(500, 3000, 100) if rng.random() < 0.85 else None
    else:
        payer, payee, subject = text.company(rng), text.company(rng), rng.choice(SERVICES_OFFERED)
        amount = rng.randrange(1000, 9500, 50)
        outcome_amount = rng.randrange(200, 2000, 50) if rng.random() < 0.85 else None
    due_day = rng.randint(1, 10)
    late_fee = (rng.choice(GRACE_DAYS), rng.choice(LATE_FEES)) if rng.random() < 0.8 else None

    threshold = rng.randint(2, 4) if rng.random() < 0.7 else None
    if threshold is not None:
        if rng.random() < 0.5:  # termination right: yes
            n_late = rng.randint(threshold, 5)
        else:
            n_late = 0 if rng.random() < 0.6 else rng.randint(1, threshold - 1)
    else:
        n_late = 0 if rng.random() < 0.45 else rng.randint(1, 5)
    term_months = [(start.month - 1 + i) % 12 + 1 for i in range(11)]  # excludes the end month
    picked = set(rng.sample(range(11), n_late))
    late_months = tuple(term_months[i] for i in sorted(picked))

    renewal = Renewal(rng.choice(NOTICE_DAYS), rng.random() < 0.6) if rng.random() < 0.8 else None
    notice_days: int | None = None
    if renewal is not None:
        k = renewal.required_days
        if rng.random() < 0.5:  # timely: at least k days before the end date
            notice_days = rng.randint(k, min(k + 10, end.day - 1))
        else:
            notice_days = rng.randint(max(1, k - 10), k - 1)
        notice_of_renewal = not renewal.opt_out
    elif rng.random() < 0.5:  # a notice without a renewal clause: a distractor
        notice_days = rng.randint(1, end.day - 1)
        notice_of_renewal = rng.random() < 0.5
    else:
        notice_of_renewal = False
    return PeriodicFacts(
        kind=kind, payer=payer, payee=payee, subject=subject, start=start, end=end,
        amount=amount, due_day=due_day, late_fee=late_fee, termination_threshold=threshold,
        renewal=renewal, notice_days=notice_days, notice_of_renewal=notice_of_renewal,
        outcome_amount=outcome_amount, late_months=late_months,
    )


def _yes_no(value: bool) -> str:
    return CHOICE_YES if value else CHOICE_NO


def answers(f: PeriodicFacts) -> dict[str, RuleAnswer]:
    """Gold answer of every question type the document can answer (the generator's rules)."""
    out: dict[str, RuleAnswer] = {}

    def put(qtype: str, gold: str | bool | int, *needs: str) -> None:
        out[qtype] = RuleAnswer(gold, frozenset(needs))

    put("monthly_payment", f.amount, "payment")
    put("due_day", f.due_day, "payment")
    n_late = len(f.late_months)
    put("late_payment_count", n_late, "record")
    if f.late_fee is not None:
        grace, fee = f.late_fee
        put("grace_period_days", grace, "late_fee")
        put("last_on_time_day", f.due_day + grace, "payment", "late_fee")
        put("late_fee_amount", fee, "late_fee")
        put("late_fee_due", n_late > 0, "late_fee", "record")
        put("late_fees_owed", n_late * fee, "late_fee", "record")
    if f.termination_threshold is not None:
        put("termination_threshold", f.termination_threshold, "termination")
        put("termination_right", _yes_no(n_late >= f.termination_threshold),
            "termination", "record")
    else:
        put("termination_right", NOT_STATED)
    if f.notice_days is not None:
        put("notice_given_days", f.notice_days, "term", "notice")
    outcome = "deposit_retained" if f.kind == LEASE else "cancellation_fee_due"
    if f.renewal is None:
        put("notice_timely", NOT_STATED)
        put("renews", NOT_STATED)
        needs = ("outcome",) if f.outcome_amount is not None else ()
        put(outcome, NOT_STATED, *needs)
    else:
        assert f.notice_days is not None
        timely = f.notice_days >= f.renewal.required_days
        put("notice_required_days", f.renewal.required_days, "renewal")
        put("notice_timely", _yes_no(timely), "renewal", "term", "notice")
        put("renews", _yes_no(timely != f.renewal.opt_out), "renewal", "term", "notice")
        if f.outcome_amount is None:
            put(outcome, NOT_STATED)
        else:
            put(outcome, _yes_no(not timely), "outcome", "renewal", "term", "notice")
    return out


# ---------------------------------------------------------------------------------------------
# Wording. Each clause has three or more wordings; {Payer} starts a sentence, {payer} does not.

ROLES = {
    LEASE: {"payer": "the Tenant", "Payer": "The Tenant", "payee": "the Landlord",
            "Payee": "The Landlord", "doc": "Lease", "pay": "rent"},
    SERVICES: {"payer": "the Client", "Payer": "The Client", "payee": "the Provider",
               "Payee": "The Provider", "doc": "Agreement", "pay": "the monthly fee"},
}
TITLES = {
    LEASE: ("RESIDENTIAL LEASE AGREEMENT", "Residential Lease", "Lease of Residential Premises"),
    SERVICES: ("SERVICES AGREEMENT", "Master Services Agreement", "Agreement for Services"),
}
PARTIES = {
    LEASE: (
        'This Lease is made between {payee_name} (the "Landlord") and {payer_name} (the "Tenant") '
        "for the premises at {subject}.",
        "{payee_name}, as Landlord, leases the premises at {subject} to {payer_name}, as Tenant.",
        "Landlord: {payee_name}. Tenant: {payer_name}. Premises: {subject}.",
    ),
    SERVICES: (
        'This Agreement is made between {payer_name} (the "Client") and {payee_name} '
        '(the "Provider"), who will provide {subject}.',
        '{payee_name} (the "Provider") agrees to provide {subject} to {payer_name} (the "Client").',
        "Client: {payer_name}. Provider: {payee_name}. Services: {subject}.",
    ),
}
TERM = (
    "The term begins on {start} and ends on {end}.",
    "This {doc} runs from {start} to {end}.",
    "Term: {start} through {end}.",
)
PAYMENT = {
    LEASE: (
        "The monthly rent is ${amount}, due on day {due} of each month.",
        "The Tenant shall pay rent of ${amount} per month on the {due_ord} day of each month.",
        "Rent: ${amount} per month, payable on the {due_ord} of each month.",
    ),
    SERVICES: (
        "The Client shall pay the Provider a fee of ${amount} per month, due on day {due} of "
        "each month.",
        "Fees: ${amount} per month, payable on the {due_ord} day of each month.",
        "The Client pays ${amount} each month; each payment is due on the {due_ord} of the month.",
    ),
}
LATE_FEE = (
    "If {pay} is paid more than {grace} days after the due date, {payer} shall pay a late fee of "
    "${fee}.",
    "A late fee of ${fee} applies to each payment made more than {grace} days after its due date.",
    "{Payer} has a grace period of {grace} days after each due date; a payment after that counts "
    "as late and costs a late fee of ${fee}.",
)
TERMINATION = (
    "If {payer} pays late {threshold} or more times during the term, {payee} may terminate this "
    "{doc}.",
    "{Payee} may terminate this {doc} early once {payer} has made {threshold} or more late "
    "payments.",
    "Termination for late payment: {threshold} or more late payments give {payee} the right to "
    "terminate.",
)
RENEWAL_OPT_OUT = (
    "This {doc} renews automatically for one year unless {payer} gives written notice of "
    "non-renewal at least {days} days before the end of the term.",
    "The term renews for another year unless {payer} gives notice of non-renewal no later than "
    "{days} days before the end date.",
    "Automatic renewal: unless {payer} gives notice of non-renewal at least {days} days before the "
    "term ends, the {doc} continues for a further year.",
)
RENEWAL_OPT_IN = (
    "This {doc} ends on the end date unless {payer} gives written notice of renewal at least "
    "{days} days before the end of the term, in which case it renews for one year.",
    "The {doc} does not renew automatically; it renews for one more year only if {payer} gives "
    "notice of renewal at least {days} days before the end date.",
    "Renewal: {payer} may renew for a further year by giving notice of renewal no later than "
    "{days} days before the term ends.",
)
OUTCOME = {
    LEASE: (
        "The Tenant has paid a security deposit of ${amount}. The Landlord may keep the deposit if "
        "the Tenant's notice under the renewal clause is late; otherwise it is returned in full.",
        "Security deposit: ${amount}. It is refunded in full when the Tenant's notice under the "
        "renewal clause is on time; the Landlord may retain it when that notice is late.",
        "A deposit of ${amount} is held by the Landlord, who may retain it only if the Tenant's "
        "notice under the renewal clause is late.",
    ),
    SERVICES: (
        "If the Client's notice under the renewal clause is late, the Client shall pay a "
        "cancellation fee of ${amount}.",
        "A cancellation fee of ${amount} is payable by the Client whenever its notice under the "
        "renewal clause is late.",
        "Cancellation fee: ${amount}, owed by the Client only if its notice under the renewal "
        "clause is late.",
    ),
}
DISTRACTORS = {
    LEASE: (
        "The premises shall be used only as a private residence.",
        "The Tenant shall keep the premises clean and report needed repairs promptly.",
        "The Landlord may enter the premises for inspection after giving reasonable notice.",
        "Smoking is not permitted anywhere in the building.",
    ),
    SERVICES: (
        "The Provider acts as an independent contractor and not as an employee of the Client.",
        "Each party shall keep the other party's business information confidential.",
        "This Agreement is governed by the laws of the state where the Client is located.",
        "The Provider shall perform the services with reasonable skill and care.",
    ),
}
EVENTS_HEADERS = ("Record of events:", "Facts:", "What has happened:")
NOTICE_EVENT = (
    "On {date}, {payer} gave written notice of {what}.",
    "{Payer} sent written notice of {what} on {date}.",
    "{Payer}'s notice of {what} was delivered on {date}.",
)
NOTICE_COUNT = " That was {days} days before the end of the term."
RECORD_LATE = (
    "{Payer} paid {pay} late in {months}.",
    "Payments were late in {months}.",
    "Late payments were recorded in {months}.",
)
RECORD_LATE_COUNTED = "Late payments ({n}): {months}."
RECORD_NONE = (
    "{Payer} has made every payment on time.",
    "No payment has been late so far.",
    "All payments were made on time.",
)


def render(f: PeriodicFacts, rng: random.Random, level: int, needed: frozenset[str]) -> str:
    """The document text. Level 2: every clause present in the facts, with distractors; level 1:
    only the clauses the questions need, and day counts written out."""
    roles = ROLES[f.kind]
    full = level >= 2

    def fmt(template: str, **values: object) -> str:
        return template.format(**roles, **values)

    clauses: list[str] = [fmt(rng.choice(PARTIES[f.kind]), payer_name=f.payer,
                              payee_name=f.payee, subject=f.subject)]
    if full or "term" in needed:
        clauses.append(fmt(rng.choice(TERM), start=text.format_date(f.start),
                           end=text.format_date(f.end)))
    if full or "payment" in needed:
        clauses.append(fmt(rng.choice(PAYMENT[f.kind]), amount=f.amount, due=f.due_day,
                           due_ord=text.ordinal(f.due_day)))
    if f.late_fee is not None and (full or "late_fee" in needed):
        clauses.append(fmt(rng.choice(LATE_FEE), grace=f.late_fee[0], fee=f.late_fee[1]))
    if f.termination_threshold is not None and (full or "termination" in needed):
        clauses.append(fmt(rng.choice(TERMINATION), threshold=f.termination_threshold))
    if f.renewal is not None and (full or "renewal" in needed):
        wordings = RENEWAL_OPT_OUT if f.renewal.opt_out else RENEWAL_OPT_IN
        clauses.append(fmt(rng.choice(wordings), days=f.renewal.required_days))
    if f.outcome_amount is not None and (full or "outcome" in needed):
        clauses.append(fmt(rng.choice(OUTCOME[f.kind]), amount=f.outcome_amount))
    if full:
        for extra in rng.sample(DISTRACTORS[f.kind], rng.randint(1, 3)):
            clauses.insert(rng.randint(2, len(clauses)), extra)
        if rng.random() < 0.5:
            clauses = [f"{i}. {c}" for i, c in enumerate(clauses, start=1)]

    events: list[str] = []
    if f.notice_days is not None and (full or "notice" in needed):
        what = "renewal" if f.notice_of_renewal else "non-renewal"
        assert f.notice_date is not None
        line = fmt(rng.choice(NOTICE_EVENT), date=text.format_date(f.notice_date), what=what)
        if not full or rng.random() < 0.4:
            line += NOTICE_COUNT.format(days=f.notice_days)
        events.append(line)
    if full or "record" in needed:
        months = text.join_and([text.MONTHS[m - 1] for m in f.late_months])
        if not f.late_months:
            events.append(fmt(rng.choice(RECORD_NONE)))
        elif not full:
            events.append(RECORD_LATE_COUNTED.format(n=len(f.late_months), months=months))
        else:
            events.append(fmt(rng.choice(RECORD_LATE), months=months))
        rng.shuffle(events)

    parts = [rng.choice(TITLES[f.kind]), "\n".join(clauses)]
    if events:
        parts.append(rng.choice(EVENTS_HEADERS) + "\n" + "\n".join(events))
    return text.fix_plurals("\n\n".join(parts))
