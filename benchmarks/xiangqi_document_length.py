"""How long the Xiangqi player's documents are, in the shipped model's tokens.

    .venv/bin/python benchmarks/xiangqi_document_length.py [--positions 2000] [--seed 2026]

The positions are the first ``--positions`` of the agreement sample
(``apps.xiangqi.agreement.agreement_sample``, validation games, the same ``--seed``), rendered as
``ModelPlayer`` renders them. Prints mean, median and maximum token counts of the whole
document, of its parts (legal-move list, tactics lines) and of the question's text, which
together with the document make the history every training row and every move decision encodes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tokenizers import Tokenizer  # noqa: E402

from apps.xiangqi.agreement import agreement_sample  # noqa: E402
from apps.xiangqi.evaluate import DATA  # noqa: E402
from apps.xiangqi.render import legal_moves_line, sorted_legal_iccs, tactics_lines  # noqa: E402
from apps.xiangqi.training import load_games  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VALID_GAMES = DATA / "valid-games.jsonl.gz"


def summary(counts: list[int]) -> dict[str, float]:
    return {"mean": round(statistics.mean(counts), 1), "median": statistics.median(counts),
            "max": max(counts)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "xiangqi")
    parser.add_argument("--valid-games", type=Path, default=VALID_GAMES)
    parser.add_argument("--positions", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    if args.positions < 1:
        parser.error("--positions must be >= 1")
    try:
        tokenizer = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    except Exception as exc:  # the tokenizers library raises a bare Exception
        raise SystemExit(f"--model {args.model}: cannot read its tokenizer.json ({exc})") from None

    def length(text: str) -> int:
        return len(tokenizer.encode(text).ids)

    parts: dict[str, list[int]] = {"document": [], "legal_moves_line": [], "tactics_lines": [],
                                   "question_text": []}
    for position in agreement_sample(load_games(args.valid_games), args.positions, args.seed):
        board, example = position.board, position.example
        legal = sorted_legal_iccs(board)
        tactics = tactics_lines(board)
        parts["document"].append(length(example.document))
        parts["legal_moves_line"].append(length(legal_moves_line(legal)))
        parts["tactics_lines"].append(length("\n".join(tactics)) if tactics else 0)
        parts["question_text"].append(length(example.question["text"]))
    result = {"positions": len(parts["document"]), "seed": args.seed,
              **{name: summary(counts) for name, counts in parts.items()}}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    from decision.cli import exit_status  # a missing games file: one line, not a traceback

    raise SystemExit(exit_status(main, "xiangqi_document_length.py: "))
