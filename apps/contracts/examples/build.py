"""Write the demo's example contracts: ``python -m apps.contracts.examples.build``.

For each kind (lease, services, NDA) it walks the validation seeds in order and keeps the first
``--per-kind`` level-2 groups whose preset answers (as the independent checker reads them off the
text) form a combination not kept yet for that kind, with at most one integer question the
document leaves unstated, so the examples differ in their outcomes (notice late / on time, a
clause missing...). The output is deterministic: rerunning it rewrites the same files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from apps.contracts import checker, generate_group
from apps.contracts.examples import EXAMPLES_DIR
from apps.contracts.generator import KINDS
from apps.contracts.presets import PRESET_FOR_KIND, PRESETS, Preset
from apps.contracts.splits import VALIDATION

LEVEL = 2
KIND_TITLES = {"lease": "Lease", "services": "Services agreement", "nda": "NDA"}


def expected_answers(document: str, preset: Preset) -> dict[str, Any]:
    """The checker's answer to each preset question (None: the text does not state it)."""
    parsed = checker.parse(document)
    expected: dict[str, Any] = {}
    for q in preset.questions:
        try:
            expected[q.id] = checker.answer(parsed, checker.classify_question(q.text))
        except checker.CheckError:
            expected[q.id] = None
    return expected


def _title(kind: str, number: int, expected: dict[str, Any]) -> str:
    facts = []
    if kind == "nda":
        for name in ("return", "report"):
            verdict = expected.get(f"{name}_timely")
            facts.append({"yes": f"{name} on time", "no": f"{name} late"}.get(
                str(verdict), f"no {name} clause"))
    else:
        facts.append({"yes": "notice on time", "no": "notice late"}.get(
            str(expected.get("timely")), "no renewal clause"))
        late = expected.get("late")
        facts.append(f"{late} late payment{'s' if late != 1 else ''}"
                     if late is not None else "no payment record")
    return f"{KIND_TITLES[kind]} {number}: {', '.join(facts)}"


def select(per_kind: int, max_seeds: int = 2000) -> list[dict[str, Any]]:
    """The examples, in kind order, as the JSON objects to write."""
    kept: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    seen: dict[str, set[tuple[Any, ...]]] = {kind: set() for kind in KINDS}
    for seed in VALIDATION.seeds(max_seeds):
        if all(len(v) >= per_kind for v in kept.values()):
            break
        group = generate_group(seed, LEVEL)
        if len(kept[group.kind]) >= per_kind:
            continue
        preset = PRESETS[PRESET_FOR_KIND[group.kind]]
        expected = expected_answers(group.document, preset)
        outcome = tuple(v for v in expected.values() if not isinstance(v, int) or
                        isinstance(v, bool))
        if sum(v is None for v in expected.values()) > 1 or outcome in seen[group.kind]:
            continue
        seen[group.kind].add(outcome)
        number = len(kept[group.kind]) + 1
        kept[group.kind].append({
            "id": f"{group.kind}-{number}", "title": _title(group.kind, number, expected),
            "kind": group.kind, "seed": seed, "split": VALIDATION.name, "level": LEVEL,
            "group_id": group.group_id, "preset": preset.id, "document": group.document,
            "questions": preset.requests(), "expected": expected,
        })
    return [example for kind in KINDS for example in kept[kind]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-kind", type=int, default=3, help="examples per kind (default 3)")
    parser.add_argument("--out", type=Path, default=EXAMPLES_DIR, help="folder to write")
    args = parser.parse_args(argv)
    if args.per_kind < 1:
        print("error: --per-kind must be at least 1", file=sys.stderr)
        return 2
    examples = select(args.per_kind)
    args.out.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:  # drop the examples of an earlier run (only files named like ours)
        for old in args.out.glob(f"{kind}-*.json"):
            old.unlink()
    for example in examples:
        path = args.out / f"{example['id']}.json"
        path.write_text(json.dumps(example, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{path.name}: seed {example['seed']}, {example['title']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
