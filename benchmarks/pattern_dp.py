"""Constraint work of long pattern slots: the edge-list programmes before and after trimming.

A slot whose automaton is too large for the dense tables (``PackedAutomata.dense``) is decoded by
the edge-list programmes. Before: ``viterbi`` then ``token_marginals`` (three passes over every
edge at every position, on ``[E, L]`` arrays). After: ``dp.search`` (Viterbi, then the scaled
backward and forward passes, each position touching only the edges on some valid path). Both run
in one process on the same inputs, interleaved repeat by repeat; medians.

    .venv/bin/python benchmarks/pattern_dp.py [--slots 8] [--repeats 3] [--decide-repeats 1]

Part 1 times the programmes alone on ``--slots`` slots of ``[a-z]{200}`` (budget 256) with
seeded random log-probabilities, in three states of a decode: all positions masked, the first
quarter fixed, and three quarters fixed (every fourth position left masked); it checks that
the tokens and scores are equal and reports how far the marginals are from a log-space
reference (the old passes underflow on such slots). Part 2 times the issue's request end to end
with ``models/default``: 8 standalone questions, each ``{"type": "pattern", "regex":
"[a-z]{200}", "max_tokens": 256}``, the engine's defaults, old and new (the old by swapping
``constrain.search`` for the legacy pair).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from decision.joint import constrain
from decision.joint.dp import (
    PackedAutomata,
    log_space_marginals,
    search,
    token_marginals,
    viterbi,
)
from decision.schemas.compile import compile_answer, tokenizer_context
from decision.schemas.models import Question

REGEX, BUDGET = "[a-z]{200}", 256


def legacy(packed: PackedAutomata, logp: torch.Tensor):
    """The edge-list decode before ``search``: ``viterbi`` then ``token_marginals``."""
    weights = packed.edge_weights(logp)
    tokens, score = viterbi(packed, weights, dense=False)
    return tokens, score, token_marginals(packed, weights, tokens, dense=False)


def question(i: int) -> dict:
    return {"id": f"p{i}", "text": f"Write pattern {i}.",
            "answer": {"type": "pattern", "regex": REGEX, "max_tokens": BUDGET}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--decide-repeats", type=int, default=1, help="0 skips part 2")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if min(args.slots, args.repeats, args.threads) < 1:
        parser.error("--slots, --repeats and --threads must be >= 1")
    torch.set_num_threads(args.threads)
    from decision.model import load_model

    model = load_model(str(args.model)).eval()
    ctx = tokenizer_context(model.tokenizer)
    automaton = compile_answer(Question.model_validate(question(0)).answer, ctx)
    packed = PackedAutomata.pack([automaton] * args.slots)
    vocab = model.config.vocab_size
    print(f"{args.model}: {REGEX}, budget {BUDGET}: {automaton.num_states} states, "
          f"{automaton.num_edges} edges a slot; {args.slots} slots; dense: "
          f"{packed.dense(BUDGET)}; torch threads {args.threads}")

    gen = torch.Generator().manual_seed(0)
    logp = torch.log_softmax(torch.randn(args.slots, BUDGET, vocab, generator=gen) * 3, -1)
    path, _ = viterbi(packed, packed.edge_weights(logp), dense=False)
    cases = {}
    for name, fixed in (("all masked", []), ("first quarter fixed", range(BUDGET // 4)),
                        ("3/4 fixed (every 4th masked)",
                         [t for t in range(BUDGET) if t % 4])):
        case = logp.clone()
        for t in fixed:  # one-hot rows on a valid path, as the sampler leaves them
            case[:, t] = float("-inf")
            case[torch.arange(args.slots), t, path[:, t]] = 0.0
        cases[name] = case

    print("\n| slots' state | old (s) | new (s) | speed-up | same tokens and scores "
          "| max abs. error of marginals, old / new |")
    print("|---|---:|---:|---:|---|---|")
    for name, case in cases.items():
        times: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(args.repeats):
            for label, fn in (("old", legacy), ("new", search)):
                start = time.perf_counter()
                out = fn(packed, case)
                times[label].append(time.perf_counter() - start)
                if label == "old":
                    old = out
                else:
                    new = out
        same = torch.equal(old[0], new[0]) and torch.equal(old[1], new[1])
        ref = log_space_marginals(packed, case, new[0])
        err_old = (old[2].double() - ref).abs().max().item()
        err_new = (new[2].double() - ref).abs().max().item()
        t_old, t_new = statistics.median(times["old"]), statistics.median(times["new"])
        print(f"| {name} | {t_old:.2f} | {t_new:.3f} | {t_old / t_new:.0f}x | {same} "
              f"| {err_old:.2g} / {err_new:.2g} |")

    if args.decide_repeats <= 0:
        return
    questions = [question(i) for i in range(8)]
    document = "Answer each question with letters only."
    print("\n| decoder | steps | total (ms) | sampler (ms) | constraint (ms) |")
    print("|---|---:|---:|---:|---:|")
    results = {"old": [], "new": []}
    for _ in range(args.decide_repeats):
        for label, fn in (("old", legacy), ("new", search)):
            constrain.search = fn  # the decode's edge-list path
            try:
                results[label].append(model.decide(document, questions, mode="standalone"))
            finally:
                constrain.search = search
    answers = {label: [[a.text for a in r.answers] for r in rs] for label, rs in results.items()}
    for label, rs in results.items():
        med = {key: statistics.median(r.timings[key] for r in rs)
               for key in ("total", "sampler", "constraint")}
        print(f"| {label} | {rs[0].steps} | {med['total']:.0f} | {med['sampler']:.0f} "
              f"| {med['constraint']:.0f} |")
    print(f"\nsame answers old/new: {answers['old'] == answers['new']}")


if __name__ == "__main__":
    from decision.cli import exit_status  # a missing model: one line, not a traceback

    raise SystemExit(exit_status(lambda: main() or 0, "pattern_dp.py: "))
