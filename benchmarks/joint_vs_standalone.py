"""Joint vs standalone vs autoregressive decoding on one model and one document.

Measures, as medians over repeats: the latency of one joint pass over 8 questions, of 8
independent standalone calls (each prefills the document), of one standalone call for the 8
questions (document cache reused, question rows batched), of an autoregressive (AR) baseline on
the same backbone (one token per forward through the causal history path, same automata);
tokens per forward at several thresholds; and the share of step time spent in constraint work.

    .venv/bin/python benchmarks/joint_vs_standalone.py [--repeats 3] [--threads 1]

Uses models/default when it exists, else a random model of the stated size with a tokenizer
trained on generated text (timings only: a random model's answers are meaningless).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from decision.joint.dp import PackedAutomata, viterbi
from decision.joint.engine import EngineConfig, decide
from decision.joint.layout import build_layout
from decision.joint.toy import lease_document, toy_model
from decision.schemas.compile import compile_answer, tokenizer_context
from decision.schemas.models import Question

QUESTIONS: list[dict[str, Any]] = [
    {"id": "payer", "text": "Which party pays for repairs?",
     "answer": {"type": "choice", "options": ["tenant", "landlord", "not stated"]}},
    {"id": "timely", "text": "Was notice given in time?", "answer": {"type": "boolean"}},
    {"id": "retain", "text": "May the landlord retain the deposit?", "answer": {"type": "boolean"}},
    {"id": "notice_days", "text": "How many days of notice are required?",
     "answer": {"type": "integer", "minimum": 0, "maximum": 365}},
    {"id": "given_days", "text": "How many days of notice were given?",
     "answer": {"type": "integer", "minimum": 0, "maximum": 365}},
    {"id": "late_count", "text": "How many earlier late payments?",
     "answer": {"type": "integer", "minimum": 0, "maximum": 20}},
    {"id": "renewal", "text": "What happens at the end of the term?",
     "answer": {"type": "choice", "options": ["renews", "ends", "not stated"]}},
    {"id": "fee", "text": "What is the late fee in euros?",
     "answer": {"type": "integer", "minimum": 0, "maximum": 5000}},
]


def load(path: Path, hidden: int, layers: int, vocab: int) -> tuple[Any, str]:
    """The shipped model when present, else a random one (described in the returned label)."""
    if (path / "config.json").exists():
        from decision.model import load_model

        model = load_model(str(path))
        params = sum(p.numel() for p in model.parameters())
        return model.eval(), f"{path} ({params / 1e6:.1f}M parameters)"
    model = toy_model(max_positions=8192, vocab_size=vocab, hidden_size=hidden, layers=layers,
                      corpus_sentences=20 * vocab)
    params = sum(p.numel() for p in model.parameters())
    return model, (
        f"random model: hidden {hidden}, {layers} layers ({layers - 1} GDN + 1 attention), "
        f"dense MLP, vocab {model.config.vocab_size}, {params / 1e6:.1f}M parameters"
    )


def document_of(model: Any, tokens: int) -> str:
    """A generated lease of about ``tokens`` tokens."""
    sentences = 10
    while True:
        doc = lease_document(sentences, seed=7)
        count = len(model.tokenizer.encode(doc).ids)
        if count >= tokens:
            return doc
        sentences = int(sentences * tokens / max(count, 1)) + 1


def timed(fn: Any, repeats: int) -> tuple[float, Any]:
    """Median wall time (ms) of ``fn()`` over ``repeats`` runs after one warm-up, last result."""
    fn()
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), out


def autoregressive(model: Any, document: str, questions: list[dict[str, Any]]) -> tuple[int, list]:
    """AR baseline: answers one token per forward through the history path, same constraints.

    Each slot is ``<ai>`` then tokens chosen greedily among those the automaton allows and from
    which acceptance stays reachable within the remaining budget; an answer ends at ``[EOS]``.
    Uses the backbone's causal pass with logits (``_history_pass``), as a causal LM would.
    Returns the number of forwards and the answer texts.
    """
    ctx = tokenizer_context(model.tokenizer)
    parsed = [Question.model_validate(q) for q in questions]
    automata = [compile_answer(q.answer, ctx) for q in parsed]
    encode = model.tokenizer.encode
    layout = build_layout(
        ctx.special, encode(document).ids, [encode(q.text).ids for q in parsed],
        [a.budget for a in automata],
    )
    device = model.device
    ids = torch.tensor([layout.history_ids], device=device)
    seg = torch.tensor([layout.history_segments], device=device)
    mask = torch.ones_like(ids, dtype=torch.bool)
    _, cache = model._history_pass(ids, mask, seg, model.empty_cache(1))
    forwards, texts = 0, []
    for i, automaton in enumerate(automata):
        packed = PackedAutomata.pack([automaton])
        table = {(int(s), int(v)): int(d)
                 for s, v, d in zip(automaton.src, automaton.tok, automaton.dst, strict=True)}
        state, out, token = 0, [], ctx.special.answers[i]
        for t in range(automaton.budget):
            step = torch.tensor([[token]], device=device)
            h, cache = model._history_pass(step, torch.ones_like(step, dtype=torch.bool),
                                           torch.full_like(step, i + 1), cache)
            forwards += 1
            logp = torch.log_softmax(model.lm_head(h[0, -1]).float().cpu(), -1)
            # weights: fixed prefix one-hot, this position the model, the rest free (log 1)
            length = automaton.budget
            lp = torch.zeros(1, length, logp.shape[0])
            for j, v in enumerate(out):
                lp[0, j] = float("-inf")
                lp[0, j, v] = 0.0
            lp[0, t] = logp
            best, _ = viterbi(packed, packed.edge_weights(lp))
            token = int(best[0, t])
            state = table[(state, token)]
            out.append(token)
            if token == ctx.special.eos:
                break
        texts.append(ctx.text(out))
    return forwards, texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--doc-tokens", type=int, default=1500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, label = load(args.model, args.hidden, args.layers, args.vocab)
    doc = document_of(model, args.doc_tokens)
    doc_tokens = len(model.tokenizer.encode(doc).ids)
    reps = args.repeats

    joint_ms, joint = timed(lambda: decide(model, doc, QUESTIONS, mode="joint"), reps)
    alone_ms, _ = timed(
        lambda: [decide(model, doc, [q], mode="standalone") for q in QUESTIONS], reps
    )
    shared_ms, shared = timed(lambda: decide(model, doc, QUESTIONS, mode="standalone"), reps)
    ar_ms, (ar_forwards, _) = timed(lambda: autoregressive(model, doc, QUESTIONS), reps)

    rows = []
    for scope in ("row", "slot"):
        config = EngineConfig(min_scope=scope)
        for threshold in (0.5, 0.7, 0.9, 1.0):
            ms, d = timed(
                lambda t=threshold, c=config: decide(model, doc, QUESTIONS, threshold=t, config=c),
                reps,
            )
            step = d.timings["denoise"] + d.timings["constraint"]
            rows.append((scope, threshold, d.steps, d.tokens_per_forward, ms,
                         100 * d.timings["constraint"] / step))
    slot_ms, slot = timed(
        lambda: decide(model, doc, QUESTIONS, config=EngineConfig(min_scope="slot")), reps
    )

    print(f"model: {label}; document {doc_tokens} tokens; 8 questions; "
          f"{reps} repeats (median); torch threads {args.threads}")
    print()
    print("| decoding | latency (ms) | forwards | latency / joint latency |")
    print("|---|---:|---:|---:|")
    print(f"| joint, 1 pass (threshold 0.9) | {joint_ms:.0f} | {joint.steps} | 1.0x |")
    print(f"| joint, 1 pass, at least one token per slot a step | {slot_ms:.0f} | {slot.steps} | "
          f"{slot_ms / joint_ms:.1f}x |")
    print(f"| 8 standalone calls (each prefills the document) | {alone_ms:.0f} | - | "
          f"{alone_ms / joint_ms:.1f}x |")
    print(f"| standalone, document cache reused, 8 rows batched | {shared_ms:.0f} | "
          f"{shared.steps} | {shared_ms / joint_ms:.1f}x |")
    print(f"| autoregressive, same backbone and constraints | {ar_ms:.0f} | {ar_forwards} | "
          f"{ar_ms / joint_ms:.1f}x |")
    print()
    print("| minimum per step | threshold | steps | tokens / forward | latency (ms) | "
          "constraint share of step |")
    print("|---|---:|---:|---:|---:|---:|")
    for scope, threshold, steps, tpf, ms, share in rows:
        print(f"| one per {scope} | {threshold} | {steps} | {tpf:.2f} | {ms:.0f} | {share:.1f}% |")
    t = joint.timings
    print()
    print(f"joint pass timings (ms): prefill {t['prefill']:.0f}, denoise {t['denoise']:.0f}, "
          f"constraint {t['constraint']:.0f}, total {t['total']:.0f}")


if __name__ == "__main__":
    main()
