"""Reproducibility of the reported numbers: held-out seeds, determinism, what a result records.

The project's rule: a decision-quality number comes from held-out data (TEST seeds of
apps/contracts/splits.py), joint and standalone are compared with the same checkpoint on the same
questions, and a result says what produced it. ``decision eval`` warned of non-TEST seeds; the
benchmarks that decode "held-out TEST groups" (benchmarks/heldout.py and its users,
joint_vs_standalone.py --contracts-seed) took TRAIN seeds without a word and printed their
numbers as TEST ones; and eval.json named the checkpoint by its path alone (``models/default``
held fifteen different models in turn), with nothing to tell which weights a result came from.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from decision.evaluate import run_eval

WARNING = "are not all TEST seeds"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from decision.serve.testing import tiny_checkpoint

    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize(("seed_start", "groups", "warned"), [
    (0, 2, True), (10_000_000, 1, True), (20_099_999, 2, True), (20_000_000, 2, False)])
def test_heldout_benchmarks_warn_of_seeds_outside_test(
    load_benchmark: Callable[[str], ModuleType], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], seed_start: int, groups: int, warned: bool,
) -> None:
    """copy_probe, integer_bounds, number_skills, rule_confusion and decoding_policies print
    "N TEST groups from seed S" whatever S was: --seed-start 0 decoded training groups and
    reported them as held-out, without a warning."""
    heldout = load_benchmark("heldout")
    monkeypatch.setattr(heldout, "load_model", lambda path: object())
    args = argparse.Namespace(model=None, seed_start=seed_start, groups=groups, threads=1)
    _, got = heldout.model_and_groups(args)
    assert [g.seed for g in got] == list(range(seed_start, seed_start + groups))
    err = capsys.readouterr().err
    assert (WARNING in err) is warned, err


@pytest.mark.parametrize(("seed", "warned"), [(0, True), (10_000_000, True),
                                              (20_000_000, False)])
def test_joint_vs_standalone_warns_of_a_contracts_seed_outside_test(
    load_benchmark: Callable[[str], ModuleType], capsys: pytest.CaptureFixture[str],
    seed: int, warned: bool,
) -> None:
    """--contracts-seed N is documented as a TEST seed; N = 0 scored a training group."""
    bench = load_benchmark("joint_vs_standalone")
    document, questions, gold = bench.contracts_case(seed)
    assert len(questions) == len(gold) == 8 and document
    err = capsys.readouterr().err
    assert (WARNING in err) is warned, err


def _without_latency(result: dict[str, Any]) -> dict[str, Any]:
    out = dict(result)
    out.pop("latency_per_group")
    out["setup"] = {k: v for k, v in out["setup"].items() if k not in ("threads", "batch_size")}
    return out


def test_eval_is_deterministic_across_runs_batch_sizes_and_threads(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Two runs with the same seeds give the same records and statistics (bootstrap seeded),
    whatever the batch size or the number of torch threads (checked by hand at 6 groups on the
    shipped model too, 2026-12-07)."""
    import torch

    threads = torch.get_num_threads()
    results, records = [], []
    try:
        for i, (batch, n_threads) in enumerate([(2, 1), (2, 1), (3, 1), (2, 2)]):
            torch.set_num_threads(n_threads)
            out = tmp_path / str(i)
            result, _ = run_eval(str(tiny_dir), 20_000_000, 3, batch_size=batch,
                                 out_dir=str(out), n_boot=50)
            results.append(_without_latency(result))
            records.append((out / "records.jsonl").read_text())
    finally:
        torch.set_num_threads(threads)
    capsys.readouterr()
    assert all(r == results[0] for r in results[1:])
    assert all(r == records[0] for r in records[1:])


def test_eval_records_the_weights_it_evaluated(tiny_dir: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """eval.json named the model by its path only: ``models/default`` is replaced at every
    stage, so two results could not be told apart or tied to the weights. It records the
    weights' SHA-256 now, the fingerprint ``decision score`` writes to OUT.run.json, also for
    a bf16 checkpoint (the shipped models' dtype) that eval widens to float32."""
    import torch

    from decision.model import load_model
    from decision.serve.engine import ModelEngine
    from decision.serve.testing import tiny_checkpoint

    run_eval(str(tiny_dir), 20_000_000, 1, batch_size=1, out_dir=str(tmp_path / "a"), n_boot=10)
    other = tiny_checkpoint(tmp_path / "other", seed=1)
    load_model(str(other)).to(torch.bfloat16).save(other)
    run_eval(str(other), 20_000_000, 1, batch_size=1, out_dir=str(tmp_path / "b"), n_boot=10)
    capsys.readouterr()
    setup_a = json.loads((tmp_path / "a" / "eval.json").read_text())["setup"]
    setup_b = json.loads((tmp_path / "b" / "eval.json").read_text())["setup"]
    score_fingerprint = ModelEngine.load(str(tiny_dir)).fingerprint
    assert setup_a["model_fingerprint"] == score_fingerprint
    assert setup_b["model_fingerprint"] != setup_a["model_fingerprint"]
    assert ModelEngine.load(str(other)).fingerprint == setup_b["model_fingerprint"]
