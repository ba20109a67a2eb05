"""Training rows from generated contract groups, through the shared layout (decision.joint.layout).

Three kinds of rows, all drawn from the same generated groups (apps.contracts, TRAIN seeds):

- **joint**: the document, all of a group's questions (1..8, mostly 2..8) and one block holding
  every answer slot, as ``decide(mode="joint")`` lays it out;
- **standalone**: the same layout with one question of the group, as ``mode="standalone"``;
- **document**: block-diffusion language modelling on the document itself (DESIGN.md section 6,
  "dense signal"): a random cut c, history = the tokens before c, block = the next 32..64 tokens.

Row ``i`` of a run is a pure function of ``(run seed, i)``: resuming needs only the step count.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import replace
from datetime import date, datetime
from typing import Any

from tokenizers import Tokenizer

from apps.contracts.generator import generate_group
from apps.contracts.questions import SCHEMAS
from apps.contracts.splits import TRAIN, VALIDATION
from apps.contracts.types import NOT_STATED, GeneratedQuestion, Group
from decision.errors import DecisionInputError
from decision.joint.layout import build_layout
from decision.schemas.compile import tokenizer_context
from decision.schemas.models import Question
from decision.train.config import TrainConfig
from decision.train.masking import ROLE_EXTRACTION, ROLE_PLAIN
from decision.train.rows import KIND_DOCUMENT, KIND_JOINT, KIND_STANDALONE, Row
from decision.train.validate import accuracy_report, score_rows


def reshaped_integer(answer: dict[str, Any], gold: int, rng: random.Random) -> dict[str, Any]:
    """``answer`` (an integer schema) with a maximum of 10^k - 1 for k from the gold answer's
    digit count to two more than the original maximum's: the same question with a slot narrower
    or wider than the type's own, still holding the gold answer."""
    k = rng.randint(len(str(gold)), len(str(answer["maximum"])) + 2)
    return {**answer, "maximum": max(10**k - 1, gold, answer["minimum"])}


_NUMBER = re.compile(r"\d+")
QTYPE_COPY = "copy_number"
QTYPE_COMPARE = "compare_numbers"
QTYPE_DAYS_BETWEEN = "days_between"
QTYPE_EVENT_DAY = "event_day"
_DATE = re.compile(r"(?:January|February|March|April|May|June|July|August|September|October|"
                   r"November|December) \d{1,2}, \d{4}")
MAX_DAYS_BETWEEN: int = SCHEMAS["return_days_taken"]["maximum"]  # the day counts asked


def cued_numbers(document: str, unique_values: bool = False) -> list[tuple[str, str]]:
    """``(cue, digits)`` for each number of ``document`` whose three preceding words (the cue)
    occur once in it; with ``unique_values`` only numbers whose value occurs once too, so the
    answer cannot be guessed from a value the document repeats (its year, say)."""
    values = Counter(m.group() for m in _NUMBER.finditer(document))
    picks = []
    for match in _NUMBER.finditer(document):
        words = document[max(0, match.start() - 60) : match.start()].split()[-3:]
        cue = " ".join(words)
        if (len(words) == 3 and document[match.start() - 1] in " $"
                and document.count(cue) == 1 and (not unique_values or values[match.group()] == 1)):
            picks.append((cue, match.group()))
    return picks


def _copy(cue: str, digits: str, qid: str, rng: random.Random) -> GeneratedQuestion:
    gold = int(digits)
    answer = reshaped_integer({"type": "integer", "minimum": 0, "maximum": gold}, gold, rng)
    return GeneratedQuestion(
        id=qid, text=f'Which number comes right after "{cue}" in the document?',
        answer=answer, gold=gold, qtype=QTYPE_COPY,
    )


def copy_question(group: Group, rng: random.Random, hard: bool = False) -> Group | None:
    """``group`` with one synthetic question instead of its own: the number that follows a cue
    (``cued_numbers``), as an integer in a slot of a random width that holds it. ``hard``: only
    values unique in the document, picked with weight = digit count (long numbers are the ones
    a model fails to copy). None when no number has such a cue."""
    picks = cued_numbers(group.document, unique_values=hard)
    if not picks:
        return None
    if hard:
        (cue, digits), = rng.choices(picks, weights=[len(d) for _, d in picks])
    else:
        cue, digits = rng.choice(picks)
    return replace(group, questions=[_copy(cue, digits, "q1", rng)])


def compare_question(group: Group, rng: random.Random, with_sources: bool) -> Group | None:
    """``group`` with a synthetic yes/no question instead of its own: is the number after one
    cue at least the number after another (two distinct values, of the same digit count when
    the document has such a pair, so the answer needs the digits, not the lengths)? With
    ``with_sources`` the two copy questions it derives from come first (a joint row: the rule
    "timely when taken <= allowed" in its barest form). None when fewer than two values."""
    picks = cued_numbers(group.document, unique_values=True)
    pairs = [(a, b) for a in picks for b in picks if int(a[1]) != int(b[1])]
    if not pairs:
        return None
    close = [(a, b) for a, b in pairs if len(a[1]) == len(b[1])]
    (cue_a, a), (cue_b, b) = rng.choice(close or pairs)
    compare = GeneratedQuestion(
        id="q3" if with_sources else "q1",
        text=f'Is the number after "{cue_a}" at least the number after "{cue_b}"?',
        answer={"type": "boolean"}, gold=int(a) >= int(b), qtype=QTYPE_COMPARE,
        depends_on=(QTYPE_COPY,) if with_sources else (),
    )
    questions = ([_copy(cue_a, a, "q1", rng), _copy(cue_b, b, "q2", rng), compare]
                 if with_sources else [compare])
    return replace(group, questions=questions)


def _parse_date(text: str) -> date:
    return datetime.strptime(text, "%B %d, %Y").date()


def days_between_question(group: Group, rng: random.Random) -> Group | None:
    """``group`` with one synthetic question instead of its own: how many days after one date
    the document states is another (1 to MAX_DAYS_BETWEEN days later) -- the subtraction that the
    day counts taken from two dates need. None when no pair of its dates is that close."""
    dates = sorted({_parse_date(m.group()): m.group() for m in _DATE.finditer(group.document)}
                   .items())
    pairs = [(a, b) for a in dates for b in dates if 0 < (b[0] - a[0]).days <= MAX_DAYS_BETWEEN]
    if not pairs:
        return None
    (first, first_text), (second, second_text) = rng.choice(pairs)
    question = GeneratedQuestion(
        id="q1", text=f"How many days after {first_text} is {second_text}?",
        answer={"type": "integer", "minimum": 0, "maximum": MAX_DAYS_BETWEEN},
        gold=(second - first).days, qtype=QTYPE_DAYS_BETWEEN,
    )
    return replace(group, questions=[question])


# The day-of-month questions of an NDA's recorded events (apps.contracts.nda): per obligation, a
# word only its event line holds, and the questions for the line's first and second date.
_EVENT_DAYS: dict[str, tuple[str, str, str]] = {
    "return_days_taken": (
        "return",
        "On what day of the month did the Disclosing Party ask in writing for the materials back?",
        "On what day of the month were the materials returned?"),
    "report_days_taken": (
        "disclosure",
        "On what day of the month was the unauthorized disclosure discovered?",
        "On what day of the month was the Disclosing Party told of the unauthorized disclosure?"),
}


def event_line(document: str, question: GeneratedQuestion) -> tuple[str, date, date] | None:
    """The line of ``document`` that records the event a days-taken ``question`` asks about,
    with its two dates (None for any other question, or when no line matches its answer)."""
    if question.qtype not in _EVENT_DAYS:
        return None
    word = _EVENT_DAYS[question.qtype][0]
    for line in document.splitlines():
        dates = [_parse_date(m.group()) for m in _DATE.finditer(line)]
        if word in line.lower() and len(dates) == 2:
            start, done = dates
            if done.day - start.day == question.gold:
                return line, start, done
    return None


def event_day_questions(group: Group, rng: random.Random) -> Group | None:
    """``group`` with one of its days-taken questions and the two questions it derives from, in
    a row of three: the day of the month each of the event's two dates falls on (an event starts
    and ends in one month, so the days taken are their difference). The step the model misses
    when the document gives only the two dates. None when the group asks no days taken."""
    picks = [(q, found) for q in group.questions if (found := event_line(group.document, q))]
    if not picks:
        return None
    taken, (_, start, done) = rng.choice(picks)
    _, start_text, done_text = _EVENT_DAYS[taken.qtype]
    day = {"type": "integer", "minimum": 1, "maximum": 31}
    return replace(group, questions=[
        GeneratedQuestion("q1", start_text, day, start.day, QTYPE_EVENT_DAY),
        GeneratedQuestion("q2", done_text, day, done.day, QTYPE_EVENT_DAY),
        replace(taken, id="q3", depends_on=(QTYPE_EVENT_DAY,)),
    ])


def answer_text(gold: Any) -> str:
    """The slot text of a typed gold answer: booleans as yes/no (BooleanAnswer), else str()."""
    if isinstance(gold, bool):
        return "yes" if gold else "no"
    return str(gold)


class Encoder:
    """Tokenizer-bound encoding of groups into layout rows."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ctx = tokenizer_context(tokenizer)
        self.special = self.ctx.special
        self._budgets: dict[str, int] = {}

    def ids(self, text: str) -> list[int]:
        """``text`` as the decoder encodes it: "[MASK]" or "<a1>" in a document is text."""
        return self.ctx.canonical_ids(text)

    def budget(self, answer: dict[str, Any]) -> int:
        """Slot length of an answer schema, exactly as the decoder computes it."""
        key = json.dumps(answer, sort_keys=True)
        if key not in self._budgets:
            schema = Question(id="q", text="q", answer=answer).answer
            self._budgets[key] = schema.budget(self.ctx.count_tokens)
        return self._budgets[key]

    def group_row(self, group: Group, picked: list[int], kind: str,
                  document_ids: list[int] | None = None, reshape: float = 0.0,
                  rng: random.Random | None = None) -> Row:
        """A joint (or one-question standalone) row of ``group``'s questions ``picked``; each
        integer question's bounds are reshaped with probability ``reshape`` (needs ``rng``)."""
        qs = [group.questions[i] for i in picked]
        doc = self.ids(group.document) if document_ids is None else document_ids
        answers = [self.ids(answer_text(q.gold)) for q in qs]
        schemas = [
            reshaped_integer(q.answer, q.gold, rng)
            if rng is not None and q.answer["type"] == "integer" and rng.random() < reshape
            else q.answer
            for q in qs
        ]
        layout = build_layout(self.special, doc, [self.ids(q.text) for q in qs],
                              [self.budget(a) for a in schemas], answers)
        block = layout.block
        slot_of = [-1] * len(block)
        for k, span in enumerate(layout.block_slots()):
            slot_of[span.start : span.end] = [k] * span.length
        return Row(
            history_ids=layout.history_ids,
            history_segments=layout.history_segments,
            block_ids=block,
            block_segments=layout.block_segments,
            slot_of=slot_of,
            roles=slot_roles(qs),
            kind=kind,
            meta={"group_id": group.group_id, "qtypes": [q.qtype for q in qs],
                  "gold": [answer_text(q.gold) for q in qs]},
        )

    def document_row(self, document: str, rng: random.Random, block_min: int,
                     block_max: int) -> Row:
        """Block diffusion on the text: history = ``<doc>`` + tokens before a random cut."""
        ids = [self.special.doc, *self.ids(document)]
        length = rng.randint(block_min, block_max)
        cut = rng.randint(1, max(1, len(ids) - length))
        block = ids[cut : cut + length]
        if not block:  # a document shorter than 2 tokens: predict it whole from <doc>
            block = ids[1:] or [self.special.eos]
        return Row(
            history_ids=ids[:cut],
            history_segments=[0] * cut,
            block_ids=block,
            block_segments=[0] * len(block),
            slot_of=[0] * len(block),
            roles=[ROLE_PLAIN],
            kind=KIND_DOCUMENT,
        )


def slot_roles(questions: list[GeneratedQuestion]) -> list[int]:
    """Dependency-aware roles: a slot another slot of the row derives from is an *input*.

    Inputs (extraction answers, and derived answers that feed a further rule) are masked less
    often than the answers that read them (masking.py); every other slot is plain.
    """
    read = {dep for q in questions for dep in q.depends_on}
    return [ROLE_EXTRACTION if q.qtype in read else ROLE_PLAIN for q in questions]


def curriculum_level(step: int, cfg: TrainConfig, rng: random.Random) -> int:
    """Level 1 (only the relevant clauses) first, then a linear shift towards level 2."""
    d = cfg.data
    if d.max_level <= 1 or step < d.level1_steps:
        return 1
    frac = min(1.0, (step - d.level1_steps) / max(1, d.curriculum_ramp_steps))
    share1 = 1.0 - frac * (1.0 - d.level1_final_share)
    return 1 if rng.random() < share1 else 2


FOCUS_SCAN = 64  # groups a focus row looks through for a question of a focus type


def check_focus_qtypes(cfg: TrainConfig) -> None:
    """Refuse a ``data.focus_qtypes`` entry that is no contract question type (a typo would
    never draw a focus row); checked by the recipe before the run writes any file."""
    unknown = sorted(set(cfg.data.focus_qtypes) - set(SCHEMAS))
    if unknown:
        raise DecisionInputError(
            f"data.focus_qtypes has unknown question types {unknown}; known: {sorted(SCHEMAS)}",
            "data.focus_qtypes",
        )


def check_tokenizer_seeds(cfg: TrainConfig) -> None:
    """Refuse a tokenizer corpus (``tokenizer.seed`` and the ``corpus_groups`` after it) that
    leaves the TRAIN split: the BPE was trained on whatever groups it named, the held-out ones
    that select (VALIDATION) and report (TEST) the model included, without a word."""
    t = cfg.tokenizer
    if t.seed < TRAIN.start or t.seed + t.corpus_groups > TRAIN.stop:
        raise DecisionInputError(
            f"tokenizer.seed {t.seed} with tokenizer.corpus_groups {t.corpus_groups} reads "
            f"groups {t.seed} to {t.seed + t.corpus_groups - 1}, outside the TRAIN split's "
            f"seeds {TRAIN.start} to {TRAIN.stop - 1} (held-out text in the tokenizer)",
            "tokenizer.seed",
        )


def check_val_groups(cfg: TrainConfig) -> None:
    """Refuse a ``data.val_groups`` above the VALIDATION split's seeds: it was refused only
    when the validation set was built, after the run had written its tokenizer, in a line that
    named no key."""
    if cfg.data.val_groups > len(VALIDATION):
        raise DecisionInputError(
            f"data.val_groups is {cfg.data.val_groups}: the validation split has "
            f"{len(VALIDATION)} groups", "data.val_groups",
        )


class RowSource:
    """Deterministic stream of training rows: ``row(i)`` depends only on (run seed, i)."""

    def __init__(self, cfg: TrainConfig, tokenizer: Tokenizer) -> None:
        self.cfg = cfg
        self.enc = Encoder(tokenizer)
        d = cfg.data
        total = d.p_joint + d.p_standalone + d.p_document
        self.cuts = (d.p_joint / total, (d.p_joint + d.p_standalone) / total)
        check_focus_qtypes(cfg)
        self.focus = frozenset(d.focus_qtypes)

    def row(self, index: int) -> Row:
        cfg = self.cfg
        rng = random.Random(f"decision.train:{cfg.run.seed}:{index}")
        level = curriculum_level(index // cfg.optim.batch_size, cfg, rng)
        seed = TRAIN.start + (cfg.run.seed * 1_000_003 + index) % len(TRAIN)
        if self.focus and rng.random() < cfg.data.p_focus:
            focus_row = self._focus_row(seed, level, rng)
            if focus_row is not None:
                return focus_row
        if cfg.data.p_event_days and rng.random() < cfg.data.p_event_days:
            event_row = self._event_days_row(seed, level, rng)
            if event_row is not None:
                return event_row
        group = generate_group(seed, level)
        if cfg.data.p_copy and rng.random() < cfg.data.p_copy:
            copy = copy_question(group, rng, hard=cfg.data.copy_hard)
            if copy is not None:
                return self.enc.group_row(copy, [0], KIND_STANDALONE)
        if cfg.data.p_days_between and rng.random() < cfg.data.p_days_between:
            between = days_between_question(group, rng)
            if between is not None:
                return self.enc.group_row(between, [0], KIND_STANDALONE,
                                          reshape=cfg.data.p_reshape_integer, rng=rng)
        if cfg.data.p_compare and rng.random() < cfg.data.p_compare:
            joint = rng.random() < 0.5
            compare = compare_question(group, rng, with_sources=joint)
            if compare is not None:
                n = len(compare.questions)
                return self.enc.group_row(compare, list(range(n)),
                                          KIND_JOINT if joint else KIND_STANDALONE)
        u = rng.random()
        reshape = cfg.data.p_reshape_integer
        if u < self.cuts[0]:
            return self.enc.group_row(group, list(range(len(group.questions))), KIND_JOINT,
                                      reshape=reshape, rng=rng)
        if u < self.cuts[1]:
            pick = rng.randrange(len(group.questions))
            return self.enc.group_row(group, [pick], KIND_STANDALONE, reshape=reshape, rng=rng)
        return self.enc.document_row(group.document, rng, cfg.data.doc_block_min,
                                     cfg.data.doc_block_max)

    def _focus_row(self, seed: int, level: int, rng: random.Random) -> Row | None:
        """A focus-type question from the first group at or after ``seed`` that has one (None
        if none of the next FOCUS_SCAN groups does): standalone, or with probability
        ``p_focus_joint`` a joint row with its inputs (``rule_with_inputs``), scanning for a
        group where the question is decided and has an input."""
        joint = self.cfg.data.p_focus_joint > 0 and rng.random() < self.cfg.data.p_focus_joint
        for k in range(FOCUS_SCAN):
            group = generate_group(TRAIN.start + (seed - TRAIN.start + k) % len(TRAIN), level)
            hits = [i for i, q in enumerate(group.questions) if q.qtype in self.focus]
            if joint:
                rows = [p for i in hits if len(p := rule_with_inputs(group, i)) > 1
                        and group.questions[i].gold != NOT_STATED]
                if rows:
                    return self.enc.group_row(group, rng.choice(rows), KIND_JOINT,
                                              reshape=self.cfg.data.p_reshape_integer, rng=rng)
            elif hits:
                return self.enc.group_row(group, [rng.choice(hits)], KIND_STANDALONE,
                                          reshape=self.cfg.data.p_reshape_integer, rng=rng)
        return None


    def _event_days_row(self, seed: int, level: int, rng: random.Random) -> Row | None:
        """From the first group at or after ``seed`` that asks the days an event took (None if
        none of the next FOCUS_SCAN groups does): half the time the joint row of
        ``event_day_questions``, else one of its two day-of-month questions alone."""
        for k in range(FOCUS_SCAN):
            group = generate_group(TRAIN.start + (seed - TRAIN.start + k) % len(TRAIN), level)
            event = event_day_questions(group, rng)
            if event is None:
                continue
            if rng.random() < 0.5:
                return self.enc.group_row(event, [0, 1, 2], KIND_JOINT,
                                          reshape=self.cfg.data.p_reshape_integer, rng=rng)
            return self.enc.group_row(event, [rng.randrange(2)], KIND_STANDALONE,
                                      reshape=self.cfg.data.p_reshape_integer, rng=rng)
        return None


def rule_with_inputs(group: Group, index: int) -> list[int]:
    """Indices of question ``index`` and of the questions of ``group`` it derives from
    (``depends_on``, transitively), inputs first in group order, the question last."""
    by_type = {q.qtype: i for i, q in enumerate(group.questions)}
    inputs: set[int] = set()
    todo = list(group.questions[index].depends_on)
    while todo:
        i = by_type.get(todo.pop())
        if i is not None and i not in inputs:
            inputs.add(i)
            todo.extend(group.questions[i].depends_on)
    return [*sorted(inputs), index]


def tokenizer_corpus(cfg: TrainConfig) -> list[str]:
    """Text of generated groups (both levels) from a seed range of its own, for the BPE."""
    texts: list[str] = []
    t = cfg.tokenizer
    for k in range(t.corpus_groups):
        group = generate_group(t.seed + k, 1 + k % 2)
        texts.append(group.document)
        for q in group.questions:
            texts.append(q.text)
            texts.append(answer_text(q.gold))
    return texts


class ValidationSet:
    """Fixed VALIDATION groups (level 2), scored jointly and one question at a time."""

    def __init__(self, cfg: TrainConfig, tokenizer: Tokenizer, level: int = 2) -> None:
        self.enc = Encoder(tokenizer)
        self.pad = self.enc.special.pad
        self.mask = self.enc.special.mask
        self.joint: list[Row] = []
        self.standalone: list[Row] = []
        for seed in VALIDATION.seeds(cfg.data.val_groups):
            group = generate_group(seed, level)
            doc = self.enc.ids(group.document)
            n = len(group.questions)
            self.joint.append(self.enc.group_row(group, list(range(n)), KIND_JOINT, doc))
            for i in range(n):
                self.standalone.append(self.enc.group_row(group, [i], KIND_STANDALONE, doc))

    def evaluate(self, model: Any) -> dict[str, Any]:
        joint_ok = score_rows(model, self.joint, self.pad, self.mask)
        sa_ok = score_rows(model, self.standalone, self.pad, self.mask)
        return accuracy_report(self.joint, joint_ok, self.standalone, sa_ok)
