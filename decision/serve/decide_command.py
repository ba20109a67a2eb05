"""``decision decide``: answer one request from files and print the JSON response."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from decision.errors import DecisionInputError
from decision.files import read_document


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "decide", help="answer questions about one document and print JSON",
        description="Answer the questions of FILE.json (a list of {id, text, answer}, or an "
        "object with 'questions' and optionally 'mode' and 'options') about the document in "
        "FILE.",
    )
    p.add_argument("--document", required=True, metavar="FILE",
                   help="document text file ('-': standard input)")
    p.add_argument("--questions", required=True, metavar="FILE.json",
                   help="questions JSON ('-': standard input)")
    p.add_argument("--mode", choices=["joint", "standalone", "auto"], default=None,
                   help="decoding mode (default: FILE.json's 'mode', else joint)")
    p.add_argument("--model", metavar="DIR", default=None,
                   help="checkpoint directory (default: the shipped models/default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threshold", type=float, default=None, help="confidence threshold (0, 1]")
    p.add_argument("--max-steps", type=int, default=None, help="denoising steps at most")
    p.add_argument("--commit", choices=["answer", "token"], default=None,
                   help="what the at-least-one-a-step rule fixes: a whole answer (the default) "
                        "or one token")
    p.add_argument("--probabilities", action="store_true",
                   help="include option probabilities (choice and boolean)")
    p.add_argument("--score-options", action="store_true",
                   help="score every option of choice and boolean questions instead of "
                        "denoising them (other questions are denoised first)")
    p.set_defaults(func=run)


def _read_text(name: str) -> str:
    """The UTF-8 text of file ``name``, or of standard input for ``-``; utf-8-sig: an editor's
    byte-order mark is no part of the text (decision score and the contracts CSVs read theirs
    the same way)."""
    if name == "-":
        return sys.stdin.buffer.read().decode("utf-8-sig")  # line ends kept, as read_document
    return read_document(name)


def read_body(args: argparse.Namespace) -> Any:
    """The request body from the files and flags, validated like ``POST /decide``."""
    from decision.serve.api import parse_decide_body

    if args.document == args.questions == "-":
        raise DecisionInputError("--document and --questions cannot both be '-' (standard "
                                 "input holds one of them)", "questions")
    try:
        document = _read_text(args.document)
    except (OSError, UnicodeDecodeError) as exc:
        raise DecisionInputError(f"cannot read {args.document}: {exc}", "document") from None
    try:
        raw = json.loads(_read_text(args.questions))
    except (OSError, UnicodeDecodeError) as exc:
        raise DecisionInputError(f"cannot read {args.questions}: {exc}", "questions") from None
    except json.JSONDecodeError as exc:
        raise DecisionInputError(
            f"{args.questions} is not JSON: {exc.msg} (line {exc.lineno})", "questions"
        ) from None
    spec = {"questions": raw} if isinstance(raw, list) else raw
    if not isinstance(spec, dict):
        raise DecisionInputError(f"{args.questions}: expected a list or an object", "questions")
    unknown = sorted(set(spec) - {"questions", "mode", "options"})
    if unknown:  # a key read by nobody (a "document" here is not the one decided) is an error
        raise DecisionInputError(
            f"{args.questions}: unknown key(s) {', '.join(map(repr, unknown))}; the object "
            "holds 'questions', 'mode' and 'options' (the document is --document)",
            unknown[0],
        )
    options = spec.get("options") or {}
    if not isinstance(options, dict):
        raise DecisionInputError(f"{args.questions}: options must be an object", "options")
    options = dict(options)
    for key, value in (("threshold", args.threshold), ("max_steps", args.max_steps),
                       ("commit", args.commit)):
        if value is not None:
            options[key] = value
    if args.probabilities:
        options["return_probabilities"] = True
    if args.score_options:
        options["score_options"] = True
    mode = args.mode if args.mode is not None else spec.get("mode", "joint")
    payload = {"document": document, "questions": spec.get("questions"), "mode": mode,
               "options": options}
    return parse_decide_body(payload)


def run(args: argparse.Namespace) -> int:
    from decision.serve.api import check_unique_ids
    from decision.serve.engine import ModelEngine
    from decision.serve.service import to_response

    body = read_body(args)
    check_unique_ids(body)
    engine = ModelEngine.load(args.model, device=args.device)
    prepared = engine.prepare(body)
    decision = engine.decide_many([prepared])[0]
    response = to_response(decision, engine.name, {})
    # print, not sys.stdout.write: started with stdout closed (>&-), sys.stdout is None
    print(json.dumps(response.model_dump(mode="json"), indent=2, ensure_ascii=False))
    return 0
