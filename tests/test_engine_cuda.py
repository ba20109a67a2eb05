"""The shipped models give on a GPU the answers they give on the CPU (the CPU is the reference).

Skipped where torch sees no GPU; `benchmarks/gpu_session.sh` runs it on a lent one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _pair(path: Path) -> tuple[object, object]:
    from decision.model import load_model

    if not (path / "config.json").is_file():
        pytest.skip(f"no model in {path}")
    return (load_model(path, device="cpu", dtype=torch.float32),
            load_model(path, device="cuda", dtype=torch.float32))


@pytest.mark.parametrize("mode", ["joint", "standalone"])
def test_contract_answers_match_the_cpu(mode: str) -> None:
    from apps.contracts.generator import generate_groups

    cpu, gpu = _pair(REPO / "models" / "default")
    requests = [
        {"document": g.document, "mode": mode, "return_probabilities": True,
         "questions": [{"id": q.id, "text": q.text, "answer": q.answer} for q in g.questions]}
        for g in generate_groups(20_000_000, 8, 2)
    ]
    on_cpu = cpu.decide_many(requests)  # type: ignore[attr-defined]
    on_gpu = gpu.decide_many(requests)  # type: ignore[attr-defined]
    for a, b in zip(on_cpu, on_gpu, strict=True):
        assert a.steps == b.steps
        for x, y in zip(a.answers, b.answers, strict=True):
            assert (x.id, x.value) == (y.id, y.value)
            assert x.confidence == pytest.approx(y.confidence, abs=1e-3)


def test_scored_moves_match_the_cpu() -> None:
    from apps.xiangqi.board import Board
    from apps.xiangqi.model_player import ModelPlayer

    cpu, gpu = _pair(REPO / "models" / "xiangqi")
    board = Board()
    for uci in ("h2e2", "h9g7", "h0g2", "i9h9", "i0h0", "b9c7"):
        expected = ModelPlayer(cpu).choose(board)
        assert ModelPlayer(gpu).choose(board) == expected
        board.push_iccs(uci)
