"""Package-level API: lazy ``decision.load_model`` and DecisionModel.decide delegation."""

from __future__ import annotations

import subprocess
import sys
import types
from typing import Any

import pytest
import torch

import decision
from decision.errors import DecisionInputError
from decision.model import DecisionModel, load_model
from decision.model.testing import tiny_model


def test_package_exports_are_lazy_and_resolve() -> None:
    assert decision.load_model is load_model and decision.DecisionModel is DecisionModel
    code = "import sys, decision.errors; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"  # importing decision does not pull in torch
    with pytest.raises(AttributeError):
        decision.no_such_name  # noqa: B018


def test_decide_methods_delegate_to_the_joint_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in engine module: this test checks the delegation, not the joint engine."""
    calls: list[tuple[Any, ...]] = []
    engine = types.ModuleType("decision.joint.engine")
    engine.decide = lambda *a, **k: calls.append(("one", a, k)) or "d"  # type: ignore[attr-defined]
    engine.decide_many = lambda *a, **k: calls.append(("many", a, k)) or []  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "decision.joint.engine", engine)
    model = tiny_model()
    assert model.decide("doc", ["q"], threshold=0.5) == "d"
    assert model.decide_many([{"document": "doc"}], config=None) == []
    assert calls[0] == ("one", (model, "doc", ["q"], "joint", 0.5, None, False), {})
    assert calls[1] == ("many", (model, [{"document": "doc"}]), {"config": None})


@pytest.mark.parametrize(
    ("call", "field"),
    [
        # a float list was cast to long: token 2.5 silently became token 2
        (lambda m: m.history_logits([[1, 2.5]]), "input_ids"),
        (lambda m: m.prefill([[1.0, 2.0]]), "input_ids"),
        # masks and segments torch cannot read raised its TypeError/ValueError
        (lambda m: m.history_logits([[1, 2]], "mask"), "attention_mask"),
        (lambda m: m.prefill([[1, 2], [3, 4]], [[1, 1], [1]]), "attention_mask"),
        (lambda m: m.history_logits([[1, 2]], None, "seg"), "segment_ids"),
        (lambda m: m.denoise([[1, 2]], m.empty_cache(1), None, [[0], [1, 2]]), "segment_ids"),
        # empty_cache with a bad size failed inside torch.zeros
        (lambda m: m.empty_cache(-1), "batch_size"),
        (lambda m: m.empty_cache(2.0), "batch_size"),
        (lambda m: m.empty_cache("2"), "batch_size"),
    ],
)
def test_bad_arguments_name_the_argument(call: Any, field: str) -> None:
    with pytest.raises(DecisionInputError) as err:
        call(tiny_model())
    assert err.value.field == field


def test_edge_arguments_still_accepted() -> None:
    model = tiny_model()
    assert model.history_logits([[]]).shape == (1, 0, model.config.vocab_size)
    assert model.history_logits([[1, 2]], [[True, False]], [[0, 1]]).shape[:2] == (1, 2)
    assert model.empty_cache(0).batch_size == 0
    assert model.empty_cache(torch.tensor(2)).batch_size == 2


def test_cache_rows_and_shard_sizes_out_of_range_are_named(tmp_path: Any) -> None:
    """``HistoryCache.index_select`` with a row past the batch (or negative, or 1.5) was torch's
    IndexError (or a silent truncation to row 1); ``save(max_shard_size="lots")`` a plain
    ValueError, and a size of 0 or -5 wrote one tensor a shard."""
    import pytest

    from decision.errors import DecisionInputError
    from decision.model.testing import tiny_model

    model = tiny_model()
    cache = model.empty_cache(2)
    assert cache.index_select([1, 1, 0]).batch_size == 3
    assert cache.index_select([]).batch_size == 0
    for rows in ([2], [-1], [1.5], [[0]], "x"):
        with pytest.raises(DecisionInputError) as refused:
            cache.index_select(rows)
        assert refused.value.field == "rows"
    for size in ("lots", 0, -5, "0MB", True, 2.5):
        with pytest.raises(DecisionInputError) as refused:
            model.save(tmp_path / "m", max_shard_size=size)
        assert refused.value.field == "max_shard_size"
    assert not (tmp_path / "m").exists()  # refused before anything was written
