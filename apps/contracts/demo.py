"""``decision contracts demo``: the contract judgments demo in the terminal.

Answers a preset question set about an example contract (or a document file) twice with the same
model, jointly (one block for all slots) and standalone (one question a pass), and prints the two
columns side by side with confidences, the time and denoising steps of each mode, what the text
itself says (for the shipped examples, read by the independent checker), and a warning for every
rule of the preset that a mode's answers break.

    decision contracts demo --list
    decision contracts demo --example 2 [--model DIR] [--probabilities]
    decision contracts demo --document lease.txt --preset lease

Light at import time (torch is imported only when the model is loaded), as ``decision.cli`` asks.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from apps.contracts.examples import Example, get_example, load_examples
from apps.contracts.presets import (
    PRESETS,
    Preset,
    RuleCheck,
    check_rules,
    get_preset,
    same_value,
    show_value,
)
from decision.errors import DecisionInputError
from decision.files import read_document

MODES: tuple[str, str] = ("joint", "standalone")
ID_WIDTH = 16
CELL_WIDTH = 22
WRONG = "*"  # marks an answer that differs from what the text says
BROKEN = "!"  # marks an answer that takes part in a broken rule


@dataclass(frozen=True)
class ModeRun:
    """One mode's response (``decision.serve.api.DecideResponse``), its wall time and checks."""

    mode: str
    response: Any
    wall_ms: float
    checks: list[RuleCheck]

    def answers(self) -> dict[str, Any]:
        """Question id -> typed answer value."""
        return {a.id: a.value for a in self.response.answers}


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "contracts", help="the contract judgments demo (joint vs standalone)",
        description="Contract judgments: generated agreements, preset questions, rules.")
    actions = parser.add_subparsers(dest="contracts_action", metavar="ACTION", required=True)
    demo = actions.add_parser(
        "demo", help="answer an example contract jointly and standalone, side by side",
        description="Answer a preset question set about an example contract in joint and in "
        "standalone mode and print the answers side by side with the rule warnings.")
    demo.add_argument("--example", type=int, default=1, metavar="N",
                      help="example number (see --list; default 1)")
    demo.add_argument("--list", action="store_true", help="list the examples and exit")
    demo.add_argument("--document", metavar="FILE",
                      help="answer about this text file instead of an example's document")
    demo.add_argument("--preset", choices=sorted(PRESETS),
                      help="question set (default: the example's)")
    demo.add_argument("--model", metavar="DIR", default=None,
                      help="checkpoint directory (default: the shipped models/default)")
    demo.add_argument("--device", default="cpu")
    demo.add_argument("--threshold", type=float, default=None,
                      help="confidence threshold (0, 1] (default 0.9)")
    demo.add_argument("--max-steps", type=int, default=None,
                      help="denoising steps at most per pass")
    demo.add_argument("--probabilities", action="store_true",
                      help="also print each option's probability (choice and yes/no answers)")
    demo.add_argument("--hide-document", action="store_true", help="do not print the document")
    demo.set_defaults(func=run)


# ---------------------------------------------------------------------- running


def make_body(document: str, preset: Preset, mode: str, threshold: float | None,
              max_steps: int | None) -> Any:
    """The ``POST /decide`` body for one mode, validated as the service validates it."""
    from decision.serve.api import parse_decide_body

    options: dict[str, Any] = {"return_probabilities": True}
    if threshold is not None:
        options["threshold"] = threshold
    if max_steps is not None:
        options["max_steps"] = max_steps
    payload = {"document": document, "questions": preset.requests(), "mode": mode,
               "options": options}
    return parse_decide_body(payload)


def run_modes(engine: Any, document: str, preset: Preset, threshold: float | None = None,
              max_steps: int | None = None) -> list[ModeRun]:
    """Answer the preset about ``document`` in each mode, one after the other, and check the
    preset's rules on each mode's answers. ``engine`` is a ``decision.serve.engine.ModelEngine``."""
    from decision.serve.service import to_response

    runs = []
    for mode in MODES:
        body = make_body(document, preset, mode, threshold, max_steps)
        prepared = engine.prepare(body)
        start = time.perf_counter()
        decision = engine.decide_many([prepared])[0]
        wall_ms = (time.perf_counter() - start) * 1000.0
        response = to_response(decision, engine.name, {})
        runs.append(ModeRun(mode, response, wall_ms,
                            check_rules(preset, {a.id: a.value for a in response.answers})))
    return runs


# ---------------------------------------------------------------------- printing


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _cell(answer: Any, expected: Any, broken: bool) -> str:
    value = _clip(show_value(answer.value), CELL_WIDTH - 8)
    marks = (WRONG if expected is not None and not same_value(answer.value, expected) else "")
    marks += BROKEN if broken else ""
    return f"{value:<{CELL_WIDTH - 8}}{round(answer.confidence * 100):>3}% {marks:<3}"


def render(questions: Sequence[Mapping[str, Any]], runs: Sequence[ModeRun],
           expected: Mapping[str, Any] | None = None, probabilities: bool = False) -> str:
    """The side-by-side table, the timings and the rule warnings of each mode, as text."""
    expected = expected or {}
    by_mode = {r.mode: {a.id: a for a in r.response.answers} for r in runs}
    broken = {r.mode: {q for c in r.checks if c.status == "broken" for q in c.questions}
              for r in runs}
    lines = ["Questions:"]
    lines += [f"  {q['id']:<{ID_WIDTH - 2}}{q['text']}" for q in questions]
    lines.append("")
    header = f"{'':<{ID_WIDTH}}" + "".join(f"{r.mode:<{CELL_WIDTH}}" for r in runs)
    lines.append(header + ("from the text" if expected else ""))
    lines.append("-" * (len(header) + (13 if expected else 0)))
    for q in questions:
        qid = q["id"]
        row = f"{_clip(qid, ID_WIDTH - 1):<{ID_WIDTH}}"
        for r in runs:
            answer = by_mode[r.mode].get(qid)
            row += (_cell(answer, expected.get(qid), qid in broken[r.mode]) if answer is not None
                    else f"{'(no answer)':<{CELL_WIDTH}}")
        if qid in expected:
            row += "not stated" if expected[qid] is None else show_value(expected[qid])
        lines.append(row.rstrip())
        if probabilities:
            for r in runs:
                answer = by_mode[r.mode].get(qid)
                if answer is not None and answer.option_probabilities:
                    probs = ", ".join(f"{k} {v * 100:.0f}%"
                                      for k, v in answer.option_probabilities.items())
                    lines.append(f"{'':<{ID_WIDTH}}  {r.mode}: {probs}")
    lines.append("")
    if expected:
        lines.append(f"{WRONG} differs from what the text says   {BROKEN} takes part in a "
                     "broken rule")
    else:
        lines.append(f"{BROKEN} takes part in a broken rule")
    lines.append("")
    for r in runs:
        resp = r.response
        lines.append(f"{r.mode + ':':<12}{r.wall_ms:8.0f} ms  {resp.steps} denoising step"
                     f"{'s' if resp.steps != 1 else ''}, {resp.tokens_per_forward:.1f} tokens "
                     "per forward")
    known = [qid for qid, v in expected.items() if v is not None]
    if known:
        scores = []
        for r in runs:
            got = by_mode[r.mode]
            right = sum(qid in got and same_value(got[qid].value, expected[qid]) for qid in known)
            scores.append(f"{r.mode} {right}/{len(known)}")
        lines.append("answers that match the text: " + ", ".join(scores))
    lines.append("")
    lines += render_warnings(runs)
    return "\n".join(lines) + "\n"


def render_warnings(runs: Sequence[ModeRun]) -> list[str]:
    """One block per mode: each broken rule with the answers it read; skipped rules last."""
    lines: list[str] = []
    for r in runs:
        bad = [c for c in r.checks if c.status == "broken"]
        if not r.checks:
            lines.append(f"rule warnings ({r.mode}): no rules declared")
        elif not bad:
            kept = sum(c.status == "kept" for c in r.checks)
            lines.append(f"rule warnings ({r.mode}): none ({kept} rules kept)")
        else:
            lines.append(f"rule warnings ({r.mode}): {len(bad)} rule"
                         f"{'s' if len(bad) != 1 else ''} broken")
            for c in bad:
                lines.append(f"  {BROKEN} {c.rule}: {c.description}")
                lines.append(f"      {c.detail}")
    skipped = {c.rule: c.detail for r in runs for c in r.checks if c.status == "skipped"}
    if skipped:
        lines.append("not checked: " + "; ".join(f"{k} ({v})" for k, v in skipped.items()))
    return lines


def list_examples(examples: Sequence[Example]) -> str:
    """One line per example: its number, title, kind, seed and preset."""
    return "".join(f"{i:>3}  {e.title}  ({e.split} seed {e.seed}, preset {e.preset})\n"
                   for i, e in enumerate(examples, start=1))


def _indent(text: str) -> str:
    return "".join(f"    {line}\n" for line in text.strip().splitlines())


def run(args: argparse.Namespace) -> int:
    """The ``decision contracts demo`` command."""
    if args.list:
        sys.stdout.write(list_examples(load_examples()))
        return 0
    example = get_example(args.example)
    preset = get_preset(args.preset or example.preset)
    if args.document is not None:
        try:  # utf-8-sig: an editor's byte-order mark is no part of the text
            document = read_document(args.document)
        except (OSError, UnicodeDecodeError) as exc:
            raise DecisionInputError(f"cannot read {args.document}: {exc}", "document") from None
        title = f"{args.document} (preset {preset.id})"
        expected: dict[str, Any] = {}
    else:
        document = example.document
        title = f"{example.title} ({example.split} seed {example.seed}, preset {preset.id})"
        # What the text says applies to the example's own questions only.
        expected = dict(example.expected) if preset.id == example.preset else {}
    # Validate both bodies before the (slow) model load, so bad options fail at once.
    for mode in MODES:
        make_body(document, preset, mode, args.threshold, args.max_steps)

    from decision.serve.engine import ModelEngine

    engine = ModelEngine.load(args.model, device=args.device)
    # Decided before anything is printed: the engine refuses some documents (blank, too long for
    # the model), and that error is then the whole output, not a title without its table.
    runs = run_modes(engine, document, preset, args.threshold, args.max_steps)
    out = sys.stdout
    out.write(f"{title}\nmodel: {engine.name}\n\n")
    if not args.hide_document:
        out.write(_indent(document) + "\n")
    out.write(render(preset.requests(), runs, expected, args.probabilities))
    return 0
