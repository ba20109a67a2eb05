"""Package-level API: lazy ``decision.load_model`` and DecisionModel.decide delegation."""

from __future__ import annotations

import subprocess
import sys
import types
from typing import Any

import pytest

import decision
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
