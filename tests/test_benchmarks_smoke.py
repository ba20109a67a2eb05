"""Smoke runs of the benchmarks/ scripts that no other test runs, each at its smallest size.

Each script runs as it is run by hand (a subprocess from the repository root, one torch thread),
except ``xiangqi_decoding_variants.py``, run in-process so that the training positions' keys
need not be computed (about 25 s); each test checks the exit status and the shape of what the
script prints (its Markdown tables' rows and cells), so a renamed import, option or function the
script uses fails here rather than at the next recorded run. Not run here: ``pattern_dp.py``
(its old decoder takes about 15 s even on one slot), ``service_load.py``'s load table (two server
start-ups, about 15 s; its memory soak, one start-up, runs here), ``gpu_kernels.py``
(tests/test_kernels_benchmark.py). ``train_step.py`` runs at
batch 1 with two windows, ``gpu_session.sh`` with a stand-in Python whose every run fails.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
MODEL = str(ROOT / "models" / "default")
XIANGQI_DATA = ROOT.parent / "shared" / "data" / "xiangqi"  # apps.xiangqi.dataset.data_dir
needs_games = pytest.mark.skipif(
    not (XIANGQI_DATA / "valid-games.jsonl.gz").is_file(),
    reason="Xiangqi games not found (clone shared/ beside the repository)")
needs_model = pytest.mark.skipif(not (ROOT / "models" / "default" / "config.json").is_file(),
                                 reason="models/default is missing")


def run(script: str, *args: str, code: int = 0) -> str:
    """stdout of ``benchmarks/SCRIPT`` with ``args``; fails unless it exits with ``code``."""
    env = dict(os.environ, OMP_NUM_THREADS="1", TRITON_INTERPRET="0")
    proc = subprocess.run([sys.executable, str(BENCHMARKS / script), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == code, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def rows(out: str) -> list[list[str]]:
    """The cells of every Markdown table row printed, the header and the rule left out."""
    lines = [line for line in out.splitlines() if line.startswith("|")]
    body = [line for i, line in enumerate(lines)
            if not line.startswith("|---") and not (i + 1 < len(lines)
                                                    and lines[i + 1].startswith("|---"))]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in body]


def fraction(cell: str) -> tuple[int, int]:
    match = re.match(r"(\d+)/(\d+)\b", cell)
    assert match, cell
    return int(match[1]), int(match[2])


@needs_model
def test_copy_probe() -> None:
    out = run("copy_probe.py", "--model", MODEL, "--groups", "10", "--batch-size", "10",
              "--threads", "1")
    asked = int(re.search(r": (\d+) TEST groups asking the days of notice", out)[1])
    assert asked >= 1
    table = rows(out)
    assert [r[0] for r in table] == ["1-90", "100-999", "1000-9999"]
    for r in table:
        right, n = fraction(r[1])
        assert n == asked and 0 <= right <= n


@needs_model
def test_integer_bounds() -> None:
    settings_per_type = {"due_day": 2, "notice_given_days": 3, "late_fee_amount": 3,
                  "monthly_payment": 3}
    out = run("integer_bounds.py", "--model", MODEL, "--groups", "6", "--batch-size", "6",
              "--threads", "1")
    table = rows(out)
    assert table
    by_type: dict[str, list[list[str]]] = {}
    for r in table:
        by_type.setdefault(r[0], []).append(r)
    for qtype, settings in by_type.items():
        assert len(settings) == settings_per_type[qtype]  # every bound setting of a type asked
        assert sum("(its own)" in r[1] for r in settings) == 1
        assert len({fraction(r[2])[1] for r in settings}) == 1  # the same questions each time
        for r in settings:
            right, n = fraction(r[2])
            assert r[3] == f"{100 * right / n:.1f}%"


@needs_model
def test_rule_confusion() -> None:
    out = run("rule_confusion.py", "--model", MODEL, "--groups", "3", "--batch-size", "3",
              "--threads", "1", "--mode", "standalone")
    assert "standalone: 3 TEST groups" in out
    table = rows(out)
    assert table and all(len(r) == 10 for r in table)  # type, then 3 x 3 (gold, answer) cells
    assert sum(int(c) for r in table for c in r[1:]) >= 1


@needs_model
def test_decoding_policies() -> None:
    out = run("decoding_policies.py", "--model", MODEL, "--groups", "2", "--batch-size", "2",
              "--policy", "0.9:row:token", "0.5:slot")
    table = rows(out)
    assert [r[:4] for r in table] == [["standalone", "0.9", "pass", "answer"],
                                      ["joint", "0.9", "pass", "token"],
                                      ["joint", "0.5", "slot", "answer"]]
    for r in table:
        assert r[4].endswith("%") and r[5].endswith("%") and float(r[6]) >= 1


@needs_model
def test_joint_vs_standalone_on_a_contracts_group() -> None:
    out = run("joint_vs_standalone.py", "--model", MODEL, "--contracts-seed", "20000000",
              "--repeats", "1")
    table = rows(out)
    decodings, thresholds = table[:6], table[6:]
    assert decodings[0][0].startswith("joint, 1 pass") and decodings[5][0].startswith("autoreg")
    for r in decodings:
        assert len(r) == 7 and fraction(r[6])[1] == 8  # scored against the 8 gold answers
    assert len(thresholds) == 12  # 3 "at least one a step" rules x 4 thresholds
    assert all(int(r[2]) >= 1 and r[5].endswith("%") for r in thresholds)
    assert "joint pass (last repeat) wall ms: prefill" in out


def test_step_cost() -> None:
    out = run("step_cost.py", "--lengths", "32", "64", "--block", "16", "--repeats", "1",
              "--baseline-repeats", "1", "--threads", "1")
    table = rows(out)
    assert [r[0] for r in table] == ["32", "64"]
    assert all(float(r[1]) > 0 and float(r[2]) > 0 and r[3].endswith("x") for r in table)


def _games(path: Path, moves: list[list[str]]) -> None:
    start = "rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RNBAKABNR w - - 0 1"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for i, game in enumerate(moves):
            handle.write(json.dumps({"game": f"g{i}", "start_fen": start, "moves": game,
                                     "result": "*"}) + "\n")


def test_xiangqi_perft_and_replay(tmp_path: Path) -> None:
    _games(tmp_path / "train-games.jsonl.gz", [["b0c2", "b9c7", "h0g2"], ["h2e2"]])
    _games(tmp_path / "valid-games.jsonl.gz", [["h2e2", "h9g7"]])
    out = run("xiangqi_perft.py", "--depth", "2", "--repeats", "1", "--data", str(tmp_path))
    perft = [line.split() for line in out.splitlines() if re.match(r"\s+[12] ", line)]
    assert [p[:3] for p in perft] == [["1", "44", "44"], ["2", "1,920", "1,920"]]
    assert "train-games.jsonl.gz: 2 games, 4 moves replayed legal" in out
    assert "valid-games.jsonl.gz: 1 games, 2 moves replayed legal" in out
    assert out.rstrip().endswith("all checks passed")
    # an illegal move (a cannon moving, not capturing, over a piece) fails the run
    _games(tmp_path / "valid-games.jsonl.gz", [["h2h8"]])
    out = run("xiangqi_perft.py", "--depth", "1", "--data", str(tmp_path), code=1)
    assert "games with an illegal move: 1" in out and out.rstrip().endswith("MISMATCH")


@needs_games
def test_xiangqi_search() -> None:
    out = run("xiangqi_search.py", "--positions", "3", "--depths", "1")
    assert "3 validation positions, margin 0" in out
    table = rows(out)
    assert [r[0] for r in table] == ["0 (repetition rule only)", "1"]
    assert int(table[1][4]) >= 1  # search nodes


def test_xiangqi_search_refuses_depth_0_before_reading_games() -> None:
    """``--depths 0`` (the depth-0 row is printed anyway) ended in SearchConfig's traceback after
    the games were read; now it is a usage error, exit status 2."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "xiangqi_search.py"), "--positions",
                           "3", "--depths", "0", "1"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 2, proc.stderr
    assert "--depths value must be >= 1" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@needs_games
def test_xiangqi_decoding_variants(load_benchmark: Callable[[str], ModuleType],
                                   monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    mod = load_benchmark("xiangqi_decoding_variants")
    monkeypatch.setattr(mod, "cached_training_keys", lambda games, cache: set())
    out_file = tmp_path / "views.json"
    assert mod.main(["--positions", "2", "--search-depth", "1", "--threads", "1",
                     "--decoder", "score", "--out", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert "2 positions (2 never in training)" in out
    names = [r[0] for r in rows(out)]
    assert names[0] == "alone" and names[-2:] == ["guided (shipped)", "guided, restricted choice"]
    assert len(names) == 10 and "master's move among the sound moves" in out
    saved = json.loads(out_file.read_text())
    assert len(saved) == 2
    for row in saved:
        assert len(row["views"]) == 4 and row["sound"] and row["restricted"] in row["sound"]
        assert all(view["answer"] in view["probs"] for view in row["views"])


@needs_games
def test_train_step_with_windows_not_dividing_each_other(tmp_path: Path) -> None:
    config = json.loads((ROOT / "configs" / "xiangqi-stage8.json").read_text())
    config["train"]["optim"]["batch_size"] = 1
    (tmp_path / "config.json").write_text(json.dumps(config))
    out = run("train_step.py", "--config", str(tmp_path / "config.json"), "--games", "20",
              "--windows", "2", "3", "--steps", "1", "--rounds", "1", "--threads", "1")
    assert "; 6 rows (" in out  # whole windows of both: 6 steps of 1 row, the same for each
    table = rows(out)
    assert [r[0] for r in table] == ["plain order", "sorted windows of 2", "sorted windows of 3"]
    assert table[0][3] == "1.00" and all(float(r[1]) > 0 and float(r[2]) > 0 for r in table)


def test_gpu_session_fails_when_a_step_fails(tmp_path: Path) -> None:
    """A failed GPU step must not end in "done" with status 0: the others still run, then the
    failures are named and the exit status is 1."""
    python = tmp_path / "python"
    python.write_text('#!/usr/bin/env bash\n[ "$1" = -c ] && exit 0  # the import probes\nexit 3\n')
    python.chmod(0o755)
    proc = subprocess.run(["bash", str(BENCHMARKS / "gpu_session.sh"), "checks"], cwd=ROOT,
                          env=dict(os.environ, PY=str(python), OUT=str(tmp_path / "out")),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout
    assert proc.stdout.count("== joint vs standalone vs AR") == 3
    assert "== FAILED: GPU tests, joint vs standalone" in proc.stdout
    assert "== done" not in proc.stdout


def test_service_load_memory_soak_with_distinct_schemas() -> None:
    """The soak (``--memory-every``) on the tiny random model: one server, RSS read after the
    warm-up and every 2 requests; no memory threshold is asserted (it is a measurement)."""
    out = run("service_load.py", "--memory-every", "2", "--requests", "4", "--warmup", "2",
              "--concurrency", "2", "--distinct-schemas")
    assert out.startswith("## Service memory") and "0 errors" in out
    assert "every request's integer range, choice options, regex, JSON schema" in out
    table = rows(out)
    assert [r[0] for r in table] == ["0", "2", "4"]
    assert table[0][2] == "+0.0" and all(float(r[1]) > 0 for r in table)


def test_service_load_soak_bodies_are_distinct_or_repeated(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("service_load_soak_under_test",
                                                  BENCHMARKS / "service_load.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)  # its dataclasses look the module up
    spec.loader.exec_module(mod)

    def schemas(i: int, distinct: bool) -> list[str]:
        return [json.dumps(q["answer"], sort_keys=True)
                for q in mod.soak_body(i, distinct)["questions"]]

    distinct = [schemas(i, True) for i in range(6)]
    for k in range(1, 5):  # integer range, choice, pattern, JSON: new in every request
        assert len({s[k] for s in distinct}) == 6
    assert len({mod.soak_body(i, True)["document"] for i in range(6)}) == 6
    assert all(schemas(i, False) == schemas(0, False) for i in range(6))
    assert mod.rss_kib(os.getpid()) > 0
