"""What a result file records of the run that made it (``setup``), and the paired comparisons
saying when two runs differ in more than the model: ``apps.xiangqi.evaluate --out``,
``benchmarks/compare_xiangqi_agreement.py`` and ``benchmarks/compare_evals.py``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from decision.metrics import Record

ROOT = Path(__file__).resolve().parents[1]
VALID = ROOT.parent / "shared" / "data" / "xiangqi" / "valid-games.jsonl.gz"
SHIPPED = ROOT / "models" / "xiangqi"
needs_xiangqi = pytest.mark.skipif(
    not (VALID.is_file() and (SHIPPED / "config.json").is_file()),
    reason="no Xiangqi game data or shipped Xiangqi model")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _printed(out: str) -> dict[str, Any]:
    """The JSON summary that ``evaluate`` prints last (indented, from its first ``{`` line)."""
    lines = out.splitlines()
    start = max(i for i, line in enumerate(lines) if line == "{")
    return json.loads("\n".join(lines[start:]))


# ---------------------------------------------------------------------- evaluate --out


@needs_xiangqi
def test_agreement_records_its_model_data_seed_and_options(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from apps.xiangqi.evaluate import main
    from decision import load_model
    from decision.model.checkpoint import weights_fingerprint

    out = tmp_path / "a.json"
    argv = ["--model", str(SHIPPED), "--out", str(out), "agreement", "--positions", "3",
            "--seed", "5", "--valid-games", str(VALID), "--train-games", str(VALID),
            "--keys-cache", str(tmp_path / "keys.npy"), "--search-depth", "1", "--margin", "0.5",
            "--quiet"]
    assert main(argv) == 0
    written = json.loads(out.read_text())
    for key in ("positions", "top1", "player", "results"):  # the keys read before: unchanged
        assert key in written
    setup = written["setup"]
    import torch

    model = load_model(str(SHIPPED), dtype=torch.float32)  # as evaluate loads it
    assert setup["model"] == str(SHIPPED)
    assert setup["model_fingerprint"] == weights_fingerprint(model)
    assert setup["command"] == "agreement" and setup["baselines"] is False
    assert setup["seed"] == 5 and setup["positions"] == 3 and setup["batch_size"] == 32
    assert setup["valid_games"] == str(VALID) and setup["train_games"] == str(VALID)
    assert setup["valid_games_sha256"] == setup["train_games_sha256"] == _sha256(VALID)
    assert setup["search_depth"] == 1 and setup["margin"] == 0.5
    assert setup["pool_from_ply"] is None and setup["decoder"] == "score"
    assert setup["threads"] == 1 and setup["device"] == "cpu" and setup["argv"] == argv
    assert _printed(capsys.readouterr().out)["setup"] == setup  # the printed record says it too
    assert main([*argv[:-1], "--pool-from-ply", "0", "--decoder", "score"]) == 0
    setup = json.loads(out.read_text())["setup"]
    assert setup["pool_from_ply"] == 0 and setup["decoder"] == "score"
    assert setup["search_depth"] == 1


@needs_xiangqi
def test_a_match_records_its_model_seed_and_options(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from apps.xiangqi.evaluate import main

    out = tmp_path / "m.json"
    argv = ["--model", str(SHIPPED), "match", "--opponent", "greedy", "--games", "2",
            "--max-plies", "2", "--seed", "9", "--concurrency", "2", "--quiet", "--out", str(out)]
    assert main(argv) == 0
    written = json.loads(out.read_text())
    assert written["games"] == 2 and len(written["results"]) == 2  # unchanged keys
    setup = written["setup"]
    assert setup["command"] == "match" and setup["model"] == str(SHIPPED)
    assert len(setup["model_fingerprint"]) == 64
    assert setup["opponent"] == "greedy" and setup["games"] == 2 and setup["max_plies"] == 2
    assert setup["seed"] == 9 and setup["concurrency"] == 2
    assert setup["search_depth"] == 0 and setup["margin"] is None  # no search: no margin used
    assert setup["pool_from_ply"] is None and setup["threads"] == 1
    assert setup["argv"] == argv
    assert _printed(capsys.readouterr().out)["setup"] == setup


@pytest.mark.skipif(not VALID.is_file(), reason=f"no game data at {VALID}")
def test_baselines_record_no_model(tmp_path: Path) -> None:
    from apps.xiangqi.evaluate import main

    out = tmp_path / "b.json"
    assert main(["--model", str(tmp_path / "no-model"), "--out", str(out), "agreement",
                 "--valid-games", str(VALID), "--positions", "4", "--seed", "3",
                 "--baselines"]) == 0
    written = json.loads(out.read_text())
    assert written["baselines"]["positions"] == 4
    setup = written["setup"]
    assert setup["model"] is None and setup["model_fingerprint"] is None  # no model played
    assert setup["baselines"] is True and setup["seed"] == 3 and setup["positions"] == 4
    assert setup["valid_games_sha256"] == _sha256(VALID)
    assert setup["search_depth"] is None and setup["train_games"] is None  # not used


# ---------------------------------------------------------------------- compare_xiangqi_agreement


def _agreement_setup(**changes: Any) -> dict[str, Any]:
    setup = {"command": "agreement", "baselines": False, "model": "runs/a",
             "model_fingerprint": "a" * 64, "device": "cpu", "threads": 1, "seed": 2026,
             "positions": 2, "batch_size": 32, "valid_games": "v.jsonl.gz",
             "valid_games_sha256": "1" * 64, "train_games": "t.jsonl.gz",
             "train_games_sha256": "2" * 64, "decoder": "choice", "search_depth": 0,
             "margin": None, "pool_from_ply": None, "argv": ["--model", "runs/a"]}
    return {**setup, **changes}


def _agreement_file(path: Path, hits: list[bool], setup: dict[str, Any] | None) -> str:
    rows = [{"ply": i, "gold": f"m{i}", "move": "x", "hit": h, "seen": False, "key": i}
            for i, h in enumerate(hits)]
    record: dict[str, Any] = {"positions": len(rows), "player": "policy", "results": rows}
    if setup is not None:
        record["setup"] = setup
    path.write_text(json.dumps(record))
    return str(path)


@pytest.fixture
def agreement_mod(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("compare_xiangqi_agreement")


def test_agreement_comparison_names_both_fingerprints_and_what_else_differs(
        agreement_mod: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _agreement_file(tmp_path / "a.json", [True, False], _agreement_setup())
    b_setup = _agreement_setup(model="runs/b", model_fingerprint="b" * 64, search_depth=3,
                               margin=0.0, threads=2, argv=["--model", "runs/b"])
    b = _agreement_file(tmp_path / "b.json", [True, True], b_setup)
    assert agreement_mod.main([a, b]) == 0  # a different decoder is compared, not refused
    out = capsys.readouterr().out
    assert "a" * 64 in out and "b" * 64 in out and "runs/a" in out and "runs/b" in out
    note = next(line for line in out.splitlines() if "differ besides the model" in line)
    assert "search_depth 0 in A, 3 in B" in note and "margin null in A, 0.0 in B" in note
    assert "threads 1 in A, 2 in B" in note  # a run setting, said apart
    assert "argv" not in note and "model_fingerprint" not in note
    assert "all: n 2" in out


def test_agreement_comparison_of_models_alone_has_no_note(
        agreement_mod: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _agreement_file(tmp_path / "a.json", [True, False], _agreement_setup())
    b = _agreement_file(tmp_path / "b.json", [True, True], _agreement_setup(
        model="runs/b", model_fingerprint="b" * 64, argv=["--model", "runs/b", "--out", "x"]))
    assert agreement_mod.main([a, b]) == 0
    out = capsys.readouterr().out
    assert "a" * 64 in out and "b" * 64 in out
    assert "differ" not in out and "note" not in out
    same = _agreement_file(tmp_path / "c.json", [True, True], _agreement_setup(search_depth=3))
    assert agreement_mod.main([a, same]) == 0  # one model, two decoders: said so
    out = capsys.readouterr().out
    assert "the same weights" in out and "search_depth 0 in A, 3 in B" in out


def test_agreement_comparison_says_when_a_file_records_no_setup(
        agreement_mod: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _agreement_file(tmp_path / "a.json", [True, False], _agreement_setup())
    old = _agreement_file(tmp_path / "old.json", [True, True], None)
    assert agreement_mod.main([a, old]) == 0
    out = capsys.readouterr().out
    assert "a" * 64 in out and "no setup recorded" in out
    old2 = _agreement_file(tmp_path / "old2.json", [False, True], None)
    assert agreement_mod.main([old, old2]) == 0  # two old files: stdout as before
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0].strip().startswith("all: n 2")
    assert "no setup" in captured.err


# ---------------------------------------------------------------------- compare_evals


def _eval_dir(path: Path, shift: int, setup: dict[str, Any] | None) -> str:
    path.mkdir(parents=True, exist_ok=True)
    records = [Record(f"g{g}", f"q{q}", (g * 5 + q + shift) % 4 > 0, f"t{q % 2}", mode,
                      gold=json.dumps(f"gold{q}"))
               for mode in ("joint", "standalone") for g in range(12) for q in range(3)]
    (path / "records.jsonl").write_text("".join(json.dumps(asdict(r)) + "\n" for r in records))
    if setup is not None:
        (path / "eval.json").write_text(json.dumps({"setup": setup}))
    return str(path)


def _eval_setup(**changes: Any) -> dict[str, Any]:
    setup = {"task": "contracts", "seed_start": 30000000, "groups": 12, "level": 2,
             "splits": ["test"], "model": "runs/d1/export", "model_fingerprint": "c" * 64,
             "batch_size": 16, "questions": 36, "threads": 1, "min_scope": "row",
             "commit": "answer", "score_options": False}
    return {**setup, **changes}


@pytest.fixture
def evals_mod(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("compare_evals")


def test_eval_comparison_names_fingerprints_and_decoder_differences(
        evals_mod: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _eval_dir(tmp_path / "a", 0, _eval_setup())
    b = _eval_dir(tmp_path / "b", 1, _eval_setup(model="runs/d2/export",
                                                  model_fingerprint="d" * 64, commit="token",
                                                  score_options=True, batch_size=8))
    assert evals_mod.main([a, b]) == 0  # compared, not refused
    out = capsys.readouterr().out
    head = out.split("| mode |")[0]  # said in the header, above the table
    assert "c" * 64 in head and "d" * 64 in head and "runs/d1/export" in head
    note = next(line for line in head.splitlines() if "differ besides the model" in line)
    assert 'commit "answer" in A, "token" in B' in note
    assert "score_options false in A, true in B" in note and "batch_size 16 in A, 8 in B" in note
    assert "| joint |" in out


def test_eval_comparison_of_models_alone_and_of_unrecorded_setups(
        evals_mod: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _eval_dir(tmp_path / "a", 0, _eval_setup())
    b = _eval_dir(tmp_path / "b", 1, _eval_setup(model="runs/d2/export",
                                                  model_fingerprint="d" * 64))
    assert evals_mod.main([a, b]) == 0
    head = capsys.readouterr().out.split("| mode |")[0]
    assert "c" * 64 in head and "d" * 64 in head and "differ" not in head
    old = _eval_dir(tmp_path / "old", 1, None)  # records.jsonl alone: no eval.json
    assert evals_mod.main([a, old]) == 0
    head = capsys.readouterr().out.split("| mode |")[0]
    assert "no setup recorded" in head and "c" * 64 in head
    no_print = _eval_dir(tmp_path / "nofp", 1, {k: v for k, v in _eval_setup().items()
                                                 if k != "model_fingerprint"})
    assert evals_mod.main([a, no_print]) == 0  # an eval.json from before the fingerprint
    head = capsys.readouterr().out.split("| mode |")[0]
    assert "weights not recorded" in head
