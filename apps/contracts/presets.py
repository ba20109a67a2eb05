"""Preset question sets of the contracts demo and the rules between their questions.

A preset is a question set for one kind of agreement (lease, services, NDA) in the generator's own
wording and answer schemas, so a model trained on generated groups reads them as it was taught. It
also *declares rules*: relations that any pair (or triple) of its answers must satisfy whatever
the document says, taken from the rule table of docs/contracts.md. "Notice late" together with
"the deposit must be returned" breaks one; the demo flags such a pair in each decoding mode.

Three kinds of rule, all plain data so they can be served as JSON:

- ``implies``: when every ``when`` condition holds (the answer is one of its values), the ``then``
  condition must hold too.
- ``verdict``: a yes/no answer must agree with a comparison of two numeric answers (or of one and a
  constant); any other value of the verdict (``"not stated"``) is left unconstrained, because an
  integer question cannot say that its clause is missing.
- ``equation``: a numeric answer must equal the sum or product of two others.

Rules bind to question *ids*. A rule whose questions are missing from the answers, whose answers
have another type than the rule expects (a question edited into another answer type), or whose
choice answer is not one of the preset question's options (its options edited), is reported as
skipped, never as kept or broken.
"""

from __future__ import annotations

import copy
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from apps.contracts.questions import SCHEMAS
from apps.contracts.types import CHOICE_NO, CHOICE_YES, NOT_STATED
from decision.errors import DecisionInputError
from decision.scoring.gold import same_value  # True apart from 1, at every depth

Value = str | bool | int | float
Status = Literal["kept", "broken", "skipped"]

COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq,
}
ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {"+": operator.add, "*": operator.mul}


@dataclass(frozen=True)
class PresetQuestion:
    """One question of a preset: its id in requests, the generator's question type, the text."""

    id: str
    qtype: str
    text: str

    @property
    def answer(self) -> dict[str, Any]:
        """The answer schema of the question type (a fresh copy: callers may edit it)."""
        return copy.deepcopy(SCHEMAS[self.qtype])

    def request(self) -> dict[str, Any]:
        """The question as ``POST /decide`` takes it."""
        return {"id": self.id, "text": self.text, "answer": self.answer}


@dataclass(frozen=True)
class Condition:
    """``question``'s answer is one of ``values``."""

    question: str
    values: tuple[Value, ...]


@dataclass(frozen=True)
class Implies:
    """When all ``when`` conditions hold, ``then`` must hold."""

    id: str
    description: str
    when: tuple[Condition, ...]
    then: Condition
    kind: Literal["implies"] = "implies"

    @property
    def questions(self) -> tuple[str, ...]:
        return _unique([c.question for c in self.when] + [self.then.question])


@dataclass(frozen=True)
class Verdict:
    """``question`` is ``if_true`` when ``left op right`` holds and ``if_false`` when it does not;
    other values of ``question`` are unconstrained. ``right`` is a question id or a constant."""

    id: str
    description: str
    question: str
    left: str
    op: str
    right: str | int
    if_true: Value = CHOICE_YES
    if_false: Value = CHOICE_NO
    kind: Literal["verdict"] = "verdict"

    @property
    def questions(self) -> tuple[str, ...]:
        operands = [self.left] + ([self.right] if isinstance(self.right, str) else [])
        return _unique([self.question, *operands])


@dataclass(frozen=True)
class Equation:
    """``result`` equals ``operands[0] op operands[1]``."""

    id: str
    description: str
    result: str
    op: str
    operands: tuple[str, str]
    kind: Literal["equation"] = "equation"

    @property
    def questions(self) -> tuple[str, ...]:
        return _unique([self.result, *self.operands])


Rule = Implies | Verdict | Equation


@dataclass(frozen=True)
class RuleCheck:
    """The outcome of one rule on one set of answers; ``detail`` names the answers it read."""

    rule: str
    status: Status
    description: str
    detail: str
    questions: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "status": self.status, "description": self.description,
                "detail": self.detail, "questions": list(self.questions)}


@dataclass(frozen=True)
class Preset:
    """A question set for one kind of agreement with the rules between its questions."""

    id: str
    title: str
    kind: str
    questions: tuple[PresetQuestion, ...]
    rules: tuple[Rule, ...] = field(default=())

    def requests(self) -> list[dict[str, Any]]:
        """The questions as ``POST /decide`` takes them."""
        return [q.request() for q in self.questions]

    def to_json(self) -> dict[str, Any]:
        """The preset as the web page reads it: questions with schemas, rules with their data."""
        return {
            "id": self.id, "title": self.title, "kind": self.kind,
            "questions": [{**q.request(), "qtype": q.qtype} for q in self.questions],
            "rules": [rule_json(r) for r in self.rules],
        }


def rule_json(rule: Rule) -> dict[str, Any]:
    """A rule as JSON (tuples become lists), with the ids of the questions it reads."""
    data: dict[str, Any] = {"id": rule.id, "kind": rule.kind, "description": rule.description,
                            "questions": list(rule.questions)}
    if isinstance(rule, Implies):
        data["when"] = [{"question": c.question, "values": list(c.values)} for c in rule.when]
        data["then"] = {"question": rule.then.question, "values": list(rule.then.values)}
    elif isinstance(rule, Verdict):
        data.update(question=rule.question, left=rule.left, op=rule.op, right=rule.right,
                    if_true=rule.if_true, if_false=rule.if_false)
    else:
        data.update(result=rule.result, op=rule.op, operands=list(rule.operands))
    return data


# ---------------------------------------------------------------------- checking


def _unique(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


# No answer schema gives a number beyond 10**18 (an integer answer's widest bounds) or one that
# is not finite: a rule does not read such a value (its product overflows, its text can exceed
# Python's 4,300 digits), it is skipped as not a number.
LARGEST_NUMBER = 10**18


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return abs(value) <= LARGEST_NUMBER  # False for nan; inf is above it


_SHOWN_CHARS = 60  # an answer quoted in a rule's detail: a long one is cut (one per rule)


def _shown(value: Any) -> str:
    """``repr(value)``, cut to :data:`_SHOWN_CHARS`: an answer is quoted by every rule that reads
    it, so a 1 MB answer came back once per rule."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS - 3] + "..."


def _not_a_number(name: str, value: Any) -> str:
    """Why ``value`` is not a number a rule reads (without printing a huge integer whole)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > LARGEST_NUMBER:
        return f"{name} is an integer beyond 10^18, which no answer gives"
    if isinstance(value, float) and (value != value or abs(value) > LARGEST_NUMBER):
        return f"{name} = {_shown(value)} is not a finite number within 10^18"
    return f"{name} = {_shown(value)} is not a number"


def show_value(value: Any) -> str:
    """An answer as text: yes/no for booleans, ``-`` for none."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "-"
    return str(value)


def _holds(condition: Condition, value: Any) -> bool:
    return any(same_value(value, v) for v in condition.values)


def _type_ok(condition: Condition, value: Any) -> bool:
    """The answer has the type of the condition's values (a string for a choice, a bool...)."""
    return any(type(value) is type(v) or (_is_number(value) and _is_number(v))
               for v in condition.values)


def _skip(rule: Rule, why: str) -> RuleCheck:
    return RuleCheck(rule.id, "skipped", rule.description, why, rule.questions)


def check_rule(rule: Rule, answers: Mapping[str, Any],
               options: Mapping[str, tuple[str, ...]] | None = None) -> RuleCheck:
    """Whether ``answers`` (question id -> typed value) keep ``rule``.

    ``options`` (question id -> the choice options its preset question offers) marks a choice
    answer outside them as unreadable: the rule is skipped, as it cannot say what that answer
    means (``check_rules`` passes the preset's).
    """
    missing = [q for q in rule.questions if q not in answers]
    if missing:
        return _skip(rule, "not asked: " + ", ".join(missing))
    for q in rule.questions:
        allowed, value = (options or {}).get(q), answers[q]
        if allowed is not None and isinstance(value, str) and value not in allowed:
            return _skip(rule, f"{q} = {_shown(value)} is not one of its options "
                               f"({', '.join(allowed)})")
    if isinstance(rule, Implies):
        return _check_implies(rule, answers)
    if isinstance(rule, Verdict):
        return _check_verdict(rule, answers)
    return _check_equation(rule, answers)


def _check_implies(rule: Implies, answers: Mapping[str, Any]) -> RuleCheck:
    for c in (*rule.when, rule.then):
        if not _type_ok(c, answers[c.question]):
            return _skip(rule, f"{c.question} = {_shown(answers[c.question])} is not an "
                               "answer this rule reads (answer type changed?)")
    detail = ", ".join(f"{q} = {show_value(answers[q])}" for q in rule.questions)
    triggered = all(_holds(c, answers[c.question]) for c in rule.when)
    broken = triggered and not _holds(rule.then, answers[rule.then.question])
    return RuleCheck(rule.id, "broken" if broken else "kept", rule.description, detail,
                     rule.questions)


def _operand(answers: Mapping[str, Any], ref: str | int) -> Any:
    return answers[ref] if isinstance(ref, str) else ref


def _check_verdict(rule: Verdict, answers: Mapping[str, Any]) -> RuleCheck:
    verdict = answers[rule.question]
    left, right = _operand(answers, rule.left), _operand(answers, rule.right)
    for name, value in ((rule.left, left), (str(rule.right), right)):
        if not _is_number(value):
            return _skip(rule, _not_a_number(name, value))
    if type(verdict) is not type(rule.if_true):
        return _skip(rule, f"{rule.question} = {_shown(verdict)} is not an answer this rule reads "
                           "(answer type changed?)")
    holds = COMPARISONS[rule.op](left, right)
    right_text = f"{rule.right} = {right}" if isinstance(rule.right, str) else str(right)
    detail = f"{rule.question} = {show_value(verdict)}, {rule.left} = {left}, {right_text}"
    expected = rule.if_true if holds else rule.if_false
    unconstrained = not (same_value(verdict, rule.if_true) or same_value(verdict, rule.if_false))
    broken = not unconstrained and not same_value(verdict, expected)
    return RuleCheck(rule.id, "broken" if broken else "kept", rule.description, detail,
                     rule.questions)


def _check_equation(rule: Equation, answers: Mapping[str, Any]) -> RuleCheck:
    values = [answers[q] for q in (rule.result, *rule.operands)]
    for q, value in zip((rule.result, *rule.operands), values, strict=True):
        if not _is_number(value):
            return _skip(rule, _not_a_number(q, value))
    result, a, b = values
    expected = ARITHMETIC[rule.op](a, b)
    detail = (f"{rule.result} = {result}, {rule.operands[0]} {rule.op} {rule.operands[1]} = "
              f"{a} {rule.op} {b} = {expected}")
    # Integers exactly; a decimal answer (a question retyped as number) up to binary rounding:
    # 3 * 0.1 is 0.30000000000000004, and a consistent 0.3 was reported broken.
    equal = result == expected or (
        any(isinstance(v, float) for v in values)
        and math.isclose(result, expected, rel_tol=1e-9, abs_tol=1e-9))
    return RuleCheck(rule.id, "kept" if equal else "broken", rule.description, detail,
                     rule.questions)


def check_rules(preset: Preset, answers: Mapping[str, Any]) -> list[RuleCheck]:
    """Every rule of ``preset`` on ``answers`` (question id -> typed value), in preset order."""
    options = {q.id: tuple(q.answer["options"]) for q in preset.questions
               if q.answer["type"] == "choice"}
    return [check_rule(rule, answers, options) for rule in preset.rules]


# ---------------------------------------------------------------------- the presets

TRI_STATED: tuple[Value, ...] = (CHOICE_YES, CHOICE_NO)


def _notice_rules(outcome: str, noun: str, outcome_words: str, payer: str) -> tuple[Rule, ...]:
    """Rules of the renewal notice: timeliness by the day counts, the outcome clause it drives
    (deposit kept / cancellation fee owed iff the notice is late), and "not stated" together."""
    return (
        Verdict("timely-by-days", f"{payer}'s notice is on time exactly when the days of notice "
                "given are at least the days required.", "timely", "given", ">=", "required"),
        Implies("late-notice-outcome", f"A late notice means {outcome_words} (or the clause is "
                "not stated): notice late together with the opposite is inconsistent.",
                (Condition("timely", (CHOICE_NO,)),),
                Condition(outcome, (CHOICE_YES, NOT_STATED))),
        Implies("timely-notice-outcome", f"A notice on time rules out that {outcome_words}.",
                (Condition("timely", (CHOICE_YES,)),),
                Condition(outcome, (CHOICE_NO, NOT_STATED))),
        Implies("no-renewal-clause-outcome", "Without a renewal clause (timeliness not stated) "
                f"the {noun} question cannot be decided either: it is not stated.",
                (Condition("timely", (NOT_STATED,)),), Condition(outcome, (NOT_STATED,))),
    )


def _renewal_rules() -> tuple[Rule, ...]:
    """Timeliness and renewal both read the renewal clause: stated together or not at all."""
    return (
        Implies("renewal-clause-missing", "No renewal clause (timeliness not stated) means "
                "renewal is not stated either.",
                (Condition("timely", (NOT_STATED,)),), Condition("renews", (NOT_STATED,))),
        Implies("renewal-clause-present", "A renewal clause (timeliness yes or no) means "
                "renewal is decided by it: yes or no, not \"not stated\".",
                (Condition("timely", TRI_STATED),), Condition("renews", TRI_STATED)),
    )


LEASE = Preset(
    id="lease",
    title="Lease: renewal notice, deposit, late payments",
    kind="lease",
    questions=(
        PresetQuestion("required", "notice_required_days", "Under the renewal clause, how many "
                       "days of notice before the end date are required?"),
        PresetQuestion("given", "notice_given_days",
                       "How many days before the end of the term did the Tenant give its notice?"),
        PresetQuestion("timely", "notice_timely",
                       "Was the Tenant's notice given on time under the renewal clause?"),
        PresetQuestion("deposit", "deposit_retained",
                       "May the Landlord keep the Tenant's security deposit?"),
        PresetQuestion("renews", "renews",
                       "Does the Lease renew for another term after the end date?"),
        PresetQuestion("late", "late_payment_count",
                       "How many late payments has the Tenant made, according to the record?"),
        PresetQuestion("threshold", "termination_threshold", "How many late payments give the "
                       "Landlord the right to terminate the Lease?"),
        PresetQuestion("terminate", "termination_right", "Given the late payments so far, may "
                       "the Landlord terminate the Lease for late payment?"),
    ),
    rules=(
        *_notice_rules("deposit", "deposit", "the Landlord may keep the deposit", "The Tenant"),
        *_renewal_rules(),
        Verdict("termination-by-count", "The Landlord may terminate exactly when the late "
                "payments reach the threshold.", "terminate", "late", ">=", "threshold"),
    ),
)

SERVICES = Preset(
    id="services",
    title="Services agreement: notice, cancellation fee, late fees",
    kind="services",
    questions=(
        PresetQuestion("required", "notice_required_days", "Under the renewal clause, how many "
                       "days of notice before the end date are required?"),
        PresetQuestion("given", "notice_given_days",
                       "How many days before the end of the term did the Client give its notice?"),
        PresetQuestion("timely", "notice_timely",
                       "Was the Client's notice given on time under the renewal clause?"),
        PresetQuestion("cancel_fee", "cancellation_fee_due",
                       "Does the Client owe the cancellation fee?"),
        PresetQuestion("late", "late_payment_count",
                       "How many late payments has the Client made, according to the record?"),
        PresetQuestion("fee", "late_fee_amount",
                       "What is the late fee for one late payment, in dollars?"),
        PresetQuestion("fee_due", "late_fee_due", "Does the Client owe at least one late fee?"),
        PresetQuestion("owed", "late_fees_owed",
                       "How much does the Client owe in late fees in total, in dollars?"),
    ),
    rules=(
        *_notice_rules("cancel_fee", "cancellation fee", "the Client owes the cancellation fee",
                      "The Client"),
        Verdict("fee-due-by-count", "A late fee is due exactly when there is at least one late "
                "payment.", "fee_due", "late", ">", 0, if_true=True, if_false=False),
        Verdict("fee-due-by-total", "A late fee is due exactly when the late fees owed are "
                "above zero.", "fee_due", "owed", ">", 0, if_true=True, if_false=False),
        Equation("total-fees", "The late fees owed are the late payments times the fee per late "
                 "payment.", "owed", "*", ("late", "fee")),
    ),
)

NDA = Preset(
    id="nda",
    title="NDA: return of materials, breach report, damages",
    kind="nda",
    questions=(
        PresetQuestion("return_deadline", "return_deadline_days",
                       "Within how many days of a written request must the materials be returned?"),
        PresetQuestion("return_taken", "return_days_taken",
                       "How many days after the written request were the materials returned?"),
        PresetQuestion("return_timely", "return_timely",
                       "Were the materials returned within the deadline the Agreement sets?"),
        PresetQuestion("report_deadline", "report_deadline_days", "Within how many days of "
                       "discovery must an unauthorized disclosure be reported?"),
        PresetQuestion("report_taken", "report_days_taken", "How many days after discovering "
                       "the unauthorized disclosure did the Receiving Party notify the Disclosing "
                       "Party?"),
        PresetQuestion("report_timely", "report_timely", "Was the unauthorized disclosure "
                       "reported within the deadline the Agreement sets?"),
        PresetQuestion("damages", "damages_owed",
                       "Does the Receiving Party owe liquidated damages under the Agreement?"),
        PresetQuestion("advisers", "advisers_allowed", "May the Receiving Party share the "
                       "confidential information with its professional advisers?"),
    ),
    rules=(
        Verdict("return-by-days", "The materials are returned on time exactly when the days "
                "taken are at most the deadline.", "return_timely", "return_taken", "<=",
                "return_deadline"),
        Verdict("report-by-days", "The disclosure is reported on time exactly when the days "
                "taken are at most the deadline.", "report_timely", "report_taken", "<=",
                "report_deadline"),
        Implies("late-return-damages", "A late return means liquidated damages are owed (or "
                "the damages clause is not stated).", (Condition("return_timely", (CHOICE_NO,)),),
                Condition("damages", (CHOICE_YES, NOT_STATED))),
        Implies("late-report-damages", "A late report means liquidated damages are owed (or "
                "the damages clause is not stated).", (Condition("report_timely", (CHOICE_NO,)),),
                Condition("damages", (CHOICE_YES, NOT_STATED))),
        Implies("nothing-late-no-damages", "With no obligation met late, no liquidated damages "
                "are owed.", (Condition("return_timely", (CHOICE_YES, NOT_STATED)),
                              Condition("report_timely", (CHOICE_YES, NOT_STATED))),
                Condition("damages", (CHOICE_NO, NOT_STATED))),
        Implies("no-obligation-no-damages", "With neither obligation stated, damages for a late "
                "one are not stated either.", (Condition("return_timely", (NOT_STATED,)),
                                               Condition("report_timely", (NOT_STATED,))),
                Condition("damages", (NOT_STATED,))),
    ),
)

PRESETS: dict[str, Preset] = {p.id: p for p in (LEASE, SERVICES, NDA)}
PRESET_FOR_KIND: dict[str, str] = {p.kind: p.id for p in PRESETS.values()}


def get_preset(preset_id: str) -> Preset:
    """The preset by id; raises ``DecisionInputError`` (field ``preset``) for an unknown one."""
    if preset_id not in PRESETS:
        raise DecisionInputError(
            f"unknown preset {preset_id!r}; expected one of {sorted(PRESETS)}", "preset")
    return PRESETS[preset_id]
