"""Question types: their wordings, answer schemas and the rules that tie them together.

A question type is *derived* when its answer follows by a rule from other question types of the
same group (``DEPENDS_ON``); the others are *extraction* questions that read one fact off the
document. Groups are biased towards holding a derived question together with what it derives
from, so that a model answering jointly can read the derived answer off answers already fixed.
"""

from __future__ import annotations

import random
from typing import Any

from apps.contracts.periodic import LEASE, SERVICES
from apps.contracts.types import TRI_OPTIONS, RuleAnswer

MAX_QUESTIONS = 8

TRI: dict[str, Any] = {"type": "choice", "options": list(TRI_OPTIONS)}
BOOL: dict[str, Any] = {"type": "boolean"}


def _int(maximum: int, minimum: int = 0) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


SCHEMAS: dict[str, dict[str, Any]] = {
    "monthly_payment": _int(10000),
    "due_day": _int(31, 1),
    "grace_period_days": _int(31),
    "last_on_time_day": _int(31, 1),
    "late_fee_amount": _int(1000),
    "late_payment_count": _int(12),
    "late_fee_due": BOOL,
    "late_fees_owed": _int(1000),
    "termination_threshold": _int(12),
    "termination_right": TRI,
    "notice_required_days": _int(90),
    "notice_given_days": _int(90),
    "notice_timely": TRI,
    "renews": TRI,
    "deposit_retained": TRI,
    "cancellation_fee_due": TRI,
    "confidentiality_years": _int(20),
    "advisers_allowed": BOOL,
    "return_deadline_days": _int(60),
    "return_days_taken": _int(60),
    "return_timely": TRI,
    "report_deadline_days": _int(60),
    "report_days_taken": _int(60),
    "report_timely": TRI,
    "damages_owed": TRI,
}

# The rule graph: each derived question type and the question types its rule reads.
DEPENDS_ON: dict[str, tuple[str, ...]] = {
    "last_on_time_day": ("due_day", "grace_period_days"),
    "late_fee_due": ("late_payment_count",),
    "late_fees_owed": ("late_payment_count", "late_fee_amount"),
    "termination_right": ("late_payment_count", "termination_threshold"),
    "notice_timely": ("notice_required_days", "notice_given_days"),
    "renews": ("notice_timely",),
    "deposit_retained": ("notice_timely",),
    "cancellation_fee_due": ("notice_timely",),
    "return_timely": ("return_deadline_days", "return_days_taken"),
    "report_timely": ("report_deadline_days", "report_days_taken"),
    "damages_owed": ("return_timely", "report_timely"),
}
DERIVED: frozenset[str] = frozenset(DEPENDS_ON)

_PERIODIC_TEXTS: dict[str, tuple[str, ...]] = {
    "due_day": ("On which day of the month is {pay} due?",
                "What day of the month is the due date of {pay}?"),
    "grace_period_days": (
        "How many days of grace period does the {doc} allow after the due date before a late fee "
        "applies?",
        "How many days after the due date may {payer} pay before the payment costs a late fee?"),
    "last_on_time_day": (
        "What is the last day of the month on which {pay} can be paid without a late fee?",
        "Up to which day of the month may {payer} pay {pay} without owing a late fee?"),
    "late_fee_amount": ("What is the late fee for one late payment, in dollars?",
                        "How many dollars does {payer} owe as the late fee for a single late "
                        "payment?"),
    "late_payment_count": ("How many late payments has {payer} made, according to the record?",
                           "According to the record of events, how many payments were late?"),
    "late_fee_due": ("Does {payer} owe at least one late fee?",
                     "Has {payer} incurred any late fee under the {doc}?"),
    "late_fees_owed": ("How much does {payer} owe in late fees in total, in dollars?",
                       "What is the total of all late fees {payer} owes, in dollars?"),
    "termination_threshold": (
        "How many late payments give {payee} the right to terminate the {doc}?",
        "After how many late payments may {payee} terminate the {doc}?"),
    "termination_right": (
        "Given the late payments so far, may {payee} terminate the {doc} for late payment?",
        "Does {payee} have the right to terminate the {doc} because of late payments?"),
    "notice_required_days": (
        "How many days before the end of the term must notice be given under the renewal clause?",
        "Under the renewal clause, how many days of notice before the end date are required?"),
    "notice_given_days": (
        "How many days before the end of the term did {payer} give its notice?",
        "How many days of notice before the end date did {payer} give?"),
    "notice_timely": (
        "Was {payer}'s notice given on time under the renewal clause?",
        "Did {payer} give its notice early enough to meet the renewal clause?"),
    "renews": ("Does the {doc} renew for another term after the end date?",
               "Will the {doc} continue for a further year after the end date?"),
    "deposit_retained": ("May the Landlord keep the Tenant's security deposit?",
                         "Is the Landlord entitled to retain the security deposit?"),
    "cancellation_fee_due": ("Does the Client owe the cancellation fee?",
                             "Must the Client pay a cancellation fee under the Agreement?"),
}
_MONTHLY_PAYMENT = {
    LEASE: ("What is the monthly rent under the Lease, in dollars?",
            "How many dollars of rent does the Tenant pay each month?"),
    SERVICES: ("What monthly fee does the Client pay under the Agreement, in dollars?",
               "How many dollars per month does the Client pay the Provider?"),
}
_ROLE_WORDS = {
    LEASE: {"payer": "the Tenant", "payee": "the Landlord", "doc": "Lease", "pay": "rent"},
    SERVICES: {"payer": "the Client", "payee": "the Provider", "doc": "Agreement",
               "pay": "the monthly fee"},
}
_NDA_TEXTS: dict[str, tuple[str, ...]] = {
    "confidentiality_years": (
        "For how many years after the effective date must the information be kept confidential?",
        "How many years does the Receiving Party's duty of confidentiality last?"),
    "advisers_allowed": (
        "May the Receiving Party share the confidential information with its professional "
        "advisers?",
        "Is disclosure to the Receiving Party's professional advisers permitted?"),
    "return_deadline_days": (
        "Within how many days of a written request must the materials be returned?",
        "How many days does the Receiving Party have to return the materials after a written "
        "request?"),
    "return_days_taken": (
        "How many days after the written request were the materials returned?",
        "How many days did the Receiving Party take to return the materials after the request?"),
    "return_timely": ("Were the materials returned within the deadline the Agreement sets?",
                      "Did the Receiving Party return the materials on time under the Agreement?"),
    "report_deadline_days": (
        "Within how many days of discovery must an unauthorized disclosure be reported?",
        "How many days does the Receiving Party have to report an unauthorized disclosure after "
        "discovering it?"),
    "report_days_taken": (
        "How many days after discovering the unauthorized disclosure did the Receiving Party "
        "notify the Disclosing Party?",
        "How many days passed between discovery of the unauthorized disclosure and the report to "
        "the Disclosing Party?"),
    "report_timely": (
        "Was the unauthorized disclosure reported within the deadline the Agreement sets?",
        "Did the Receiving Party report the unauthorized disclosure on time under the Agreement?"),
    "damages_owed": ("Does the Receiving Party owe liquidated damages under the Agreement?",
                     "Must the Receiving Party pay liquidated damages for a late obligation?"),
}


def question_text(qtype: str, kind: str, rng: random.Random) -> str:
    """One wording of the question, self-contained: it names the party and what counts."""
    if kind in _ROLE_WORDS:
        if qtype == "monthly_payment":
            return rng.choice(_MONTHLY_PAYMENT[kind])
        words = _ROLE_WORDS[kind]
        chosen = rng.choice(_PERIODIC_TEXTS[qtype]).format(**words)
    else:
        chosen = rng.choice(_NDA_TEXTS[qtype])
    return chosen[0].upper() + chosen[1:]


def closure(qtype: str) -> list[str]:
    """The question type and everything it derives from, inputs before what reads them."""
    order: list[str] = []

    def visit(q: str) -> None:
        for dep in DEPENDS_ON.get(q, ()):
            visit(dep)
        if q not in order:
            order.append(q)

    visit(qtype)
    return order


def select(rng: random.Random, available: dict[str, RuleAnswer], p_chain: float = 0.75
           ) -> list[str]:
    """Choose 1..8 question types for a group, in a random order.

    With probability ``p_chain`` the group is built around a derived question type and every
    available type its rule reads (transitively); the rest is filled with random others.
    """
    size = rng.randint(1, MAX_QUESTIONS)
    chosen: list[str] = []
    derived = sorted(q for q in available if q in DERIVED)
    if derived and rng.random() < p_chain:
        target = rng.choice(derived)
        chosen = [q for q in closure(target) if q in available]
    rest = sorted(q for q in available if q not in chosen)
    rng.shuffle(rest)
    while len(chosen) < size and rest:
        chosen.append(rest.pop())
    rng.shuffle(chosen)
    return chosen[:MAX_QUESTIONS]
