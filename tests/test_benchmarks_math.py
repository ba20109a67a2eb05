"""The arithmetic behind recorded benchmark numbers: medians over repeats, percentiles, ratios,
"joint minus standalone" signs, per-phase and per-bucket splits, each checked on made-up inputs
whose right answer differs from what a plausible slip (mean for median, swapped operands, an
off-by-one bucket edge) would print. Models, clocks and games are stand-ins: every test is fast.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from test_benchmarks_smoke import rows

BENCHMARKS = str(Path(__file__).resolve().parents[1] / "benchmarks")


class _Clock:
    """A stand-in for the ``time`` module: the clocks move only when ``advance`` is called."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def advance(self, wall: float, cpu: float | None = None) -> None:
        self.wall += wall
        self.cpu += wall if cpu is None else cpu

    def perf_counter(self) -> float:
        return self.wall

    def process_time(self) -> float:
        return self.cpu

    def monotonic(self) -> float:
        return self.wall


@pytest.fixture
def heldout_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripts that import their neighbour heldout.py find it."""
    monkeypatch.syspath_prepend(BENCHMARKS)
    monkeypatch.delitem(sys.modules, "heldout", raising=False)


# ------------------------------------------------------------------ joint_vs_standalone.py


def test_joint_vs_standalone_measure_takes_medians_of_wall_and_cpu_apart(
        load_benchmark: Callable[[str], ModuleType], monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load_benchmark("joint_vs_standalone")
    clock = _Clock()
    monkeypatch.setattr(mod, "time", clock)
    # per case, the (wall, cpu) seconds of the warm-up and then of each of 3 repeats
    steps = {"a": iter([(5.0, 5.0), (0.001, 0.010), (0.002, 0.020), (0.009, 0.090)]),
             "b": iter([(5.0, 5.0), (0.030, 0.003), (0.010, 0.001), (0.020, 0.002)])}

    def case(name: str) -> Callable[[], str]:
        def run() -> str:
            clock.advance(*next(steps[name]))
            return name
        return run

    got = mod.measure({"a": case("a"), "b": case("b")}, 3)
    assert got["a"] == (pytest.approx(2.0), pytest.approx(20.0), "a")  # medians, ms; not means
    assert got["b"] == (pytest.approx(20.0), pytest.approx(2.0), "b")  # wall first, then CPU


@dataclass
class _Out:
    steps: int
    tokens_per_forward: float
    answers: list[Any]
    timings: dict[str, float] = field(default_factory=lambda: {
        "prefill": 1.0, "denoise": 30.0, "sampler": 10.0, "constraint": 4.0, "total": 41.0})


def test_joint_vs_standalone_table_ratios_rows_and_scores(
        load_benchmark: Callable[[str], ModuleType], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Each printed row is its own case: steps per (rule, threshold), CPU and wall / joint (not
    joint / case), the constraint share of the whole step, answers scored in question order."""
    mod = load_benchmark("joint_vs_standalone")
    clock = _Clock()
    monkeypatch.setattr(mod, "time", clock)
    questions = [{"id": f"q{i}", "text": f"question {i}?", "answer": {"type": "integer"}}
                 for i in range(8)]
    gold = list(range(10, 18))
    monkeypatch.setattr(mod, "load", lambda *a, **k: (SimpleNamespace(
        tokenizer=SimpleNamespace(encode=lambda s: SimpleNamespace(ids=[0] * 50))), "fake"))
    monkeypatch.setattr(mod, "contracts_case", lambda seed: ("doc", questions, gold))
    rule = {("row", "answer"): 1, ("row", "token"): 2, ("slot", "token"): 3}

    def decide(model: Any, doc: str, qs: list[dict[str, Any]], mode: str = "joint",
               config: Any = None, threshold: float = 0.9) -> _Out:
        if mode == "standalone":  # one call: 5 ms wall, 4 ms CPU
            clock.advance(0.005, 0.004)
        else:  # a joint pass: 10 ms wall, 20 ms CPU
            clock.advance(0.010, 0.020)
        key = ("row", "answer") if config is None else (config.min_scope, config.commit)
        steps = 100 * rule[key] + round(10 * threshold)
        texts = [str(gold[int(q["id"][1:])]) for q in qs]
        return _Out(steps, steps / 10, [SimpleNamespace(text=t) for t in texts])

    def autoregressive(model: Any, doc: str, qs: list[dict[str, Any]]) -> tuple[int, list[str]]:
        clock.advance(0.080, 0.040)
        return 24, [str(g) for g in gold]

    monkeypatch.setattr(mod, "decide", decide)
    monkeypatch.setattr(mod, "autoregressive", autoregressive)
    monkeypatch.setattr(sys, "argv", ["joint_vs_standalone.py", "--contracts-seed", "1",
                                      "--repeats", "1"])
    mod.main()
    table = rows(capsys.readouterr().out)
    decodings, thresholds = table[:6], table[6:]
    by_case = {r[0].split(" (")[0].split(",")[0]: r for r in decodings}
    alone = next(r for r in decodings if r[0].startswith("8 standalone calls"))
    # 8 standalone calls: 40 ms wall (4.0x joint's 10), 32 ms CPU (1.6x joint's 20)
    assert alone[2:6] == ["40", "32", "1.6x", "4.0x"]
    ar = by_case["autoregressive"]
    assert ar[1:6] == ["24", "80", "40", "2.0x", "8.0x"]
    assert decodings[0][1] == "109" and decodings[1][1] == "209" and decodings[2][1] == "309"
    assert all(r[6] == "8/8" for r in decodings)  # every case's answers in question order
    assert len(thresholds) == 12
    for r in thresholds:
        name = {"whole answer per pass": 1, "token per pass": 2, "token per slot": 3}[r[0]]
        steps = 100 * name + round(10 * float(r[1]))
        assert r[2] == str(steps) and r[3] == f"{steps / 10:.2f}"
        assert r[5] == "10.0%" and r[6] == "25.0%"  # constraint 4 and sampler 10 of a 40 step


# ------------------------------------------------------------------ compare_evals.py


def test_compare_evals_b_minus_a_has_the_sign_and_discordant_order_of_b_over_a(
        load_benchmark: Callable[[str], ModuleType], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """B right where A is wrong: B - A positive, "(right only in B / only in A)" = (40 / 0), and
    the question-type columns A then B."""
    import json
    from dataclasses import asdict

    from decision.metrics import Record

    mod = load_benchmark("compare_evals")

    def write(name: str, wrong_q: int | None) -> str:
        rows = [Record(f"g{g}", f"q{q}", q != wrong_q, f"t{q % 2}", mode, gold=json.dumps(q))
                for mode in ("joint", "standalone") for g in range(40) for q in range(5)]
        path = tmp_path / name
        path.mkdir()
        (path / "records.jsonl").write_text("".join(json.dumps(asdict(r)) + "\n" for r in rows))
        return str(path)

    a, b = write("a", 0), write("b", None)  # A misses q0 of every group, B misses nothing
    assert mod.main([a, b]) == 0
    table = rows(capsys.readouterr().out)
    joint = next(r for r in table if r[0] == "joint")
    assert joint[1].startswith("+20.0 [") and joint[1].endswith("(40 / 0)")
    assert joint[2].startswith("+100.0 [") and joint[2].endswith("(40 / 0)")
    t0 = next(r for r in table if r[0] == "t0")  # q0, q2, q4: A 2/3, B 3/3
    assert t0 == ["t0", "66.7%", "100.0%", "66.7%", "100.0%", "120"]
    assert mod.main([b, a]) == 0
    joint = next(r for r in rows(capsys.readouterr().out) if r[0] == "joint")
    assert joint[1].startswith("-20.0 [") and joint[1].endswith("(0 / 40)")


# ------------------------------------------------------------------ xiangqi_search.py


def test_xiangqi_search_p90_is_nearest_rank(load_benchmark: Callable[[str], ModuleType]) -> None:
    mod = load_benchmark("xiangqi_search")
    assert mod._p90([float(v) for v in range(1, 11)]) == 9.0  # ceil(0.9 * 10) = 9th value
    assert mod._p90([float(v) for v in range(1, 21)]) == 18.0
    assert mod._p90([1.0, 2.0]) == 2.0 and mod._p90([3.0]) == 3.0


def test_xiangqi_search_prints_the_median_of_the_nodes(
        load_benchmark: Callable[[str], ModuleType], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    mod = load_benchmark("xiangqi_search")
    nodes = iter([1, 2, 100])

    class Search:
        def __init__(self, board: Any, config: Any) -> None:
            self.nodes = 0

        def negamax(self, *args: Any) -> None:
            self.nodes = next(nodes)

    monkeypatch.setattr(mod, "load_games", lambda path, limit: [
        SimpleNamespace(moves=[""] * 80)])
    monkeypatch.setattr(mod, "board_at", lambda game, ply: SimpleNamespace(turn=0))
    monkeypatch.setattr(mod, "sound_moves", lambda *a: [])
    monkeypatch.setattr(mod, "repetition_safe_moves", lambda *a: [])
    monkeypatch.setattr(mod, "_Search", Search)
    monkeypatch.setattr(sys, "argv", ["xiangqi_search.py", "--positions", "3", "--depths", "1"])
    assert mod.main() == 0
    table = rows(capsys.readouterr().out)
    assert table[1][0] == "1" and table[1][4] == "2"  # the median of 1, 2, 100


# ------------------------------------------------------------------ xiangqi_perft.py


def test_xiangqi_perft_nodes_per_second_use_the_median_time(
        load_benchmark: Callable[[str], ModuleType], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    mod = load_benchmark("xiangqi_perft")
    clock = _Clock()
    monkeypatch.setattr(mod, "time", clock)
    seconds = iter([1.0, 2.0, 11.0])

    def perft(board: Any, depth: int) -> int:
        clock.advance(next(seconds))
        return 44

    monkeypatch.setattr(mod, "perft", perft)
    assert mod.bench_perft(1, 3)
    line = capsys.readouterr().out.splitlines()[1].split()
    assert line == ["1", "44", "44", "2.000", "22"]  # median 2 s: 22 nodes/s


# ------------------------------------------------------------------ step_cost.py


def test_step_cost_median_ms_is_the_median(load_benchmark: Callable[[str], ModuleType],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load_benchmark("step_cost")
    clock = _Clock()
    monkeypatch.setattr(mod, "time", clock)
    seconds = iter([0.5, 0.001, 0.002, 0.012])
    assert mod.median_ms(lambda: clock.advance(next(seconds)), 3) == pytest.approx(2.0)


# ------------------------------------------------------------------ service_load.py


def test_service_load_percentiles_are_nearest_rank_and_batch_stats_read_count_and_sum(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    # registered before it runs: its dataclass looks its module up in sys.modules
    spec = importlib.util.spec_from_file_location("service_load_under_test",
                                                  Path(BENCHMARKS) / "service_load.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)
    spec.loader.exec_module(mod)
    cell = mod.Cell(True, 4, 10, 2.0, [float(v) for v in range(10, 0, -1)], 0, 1.0)
    assert (cell.pct(50), cell.pct(95), cell.pct(99), cell.pct(10)) == (5.0, 10.0, 10.0, 1.0)
    assert mod.Cell(True, 1, 20, 4.0, [float(v) for v in range(1, 21)], 0, 1.0).pct(95) == 19.0
    assert cell.rps == 5.0
    metrics = ("# HELP decision_batch_size x\ndecision_batch_size_bucket{le=\"1\"} 3\n"
               "decision_batch_size_sum 42\ndecision_batch_size_count 7\n")
    assert mod._batch_stats(metrics) == (7.0, 42.0)
    row = mod.table([cell]).splitlines()[-1]
    assert row == "| on | 4 | 10 | 5.00 | 5 | 10 | 10 | 1.0 | 0 |"


# ------------------------------------------------------------------ number_skills.py


@dataclass(frozen=True)
class _Q:
    id: str
    gold: Any
    text: str = "?"
    answer: dict[str, Any] = field(default_factory=lambda: {"type": "integer"})
    qtype: str = "x"


@dataclass(frozen=True)
class _Group:
    group_id: str
    questions: list[_Q]
    document: str = "doc"


class _Model:
    """``decide_many``: each question's answer from ``answer(request, question id)``."""

    def __init__(self, answer: Callable[[dict[str, Any], str], Any]) -> None:
        self.answer = answer

    def decide_many(self, requests: list[dict[str, Any]], config: Any = None) -> list[Any]:
        out = []
        for request in requests:
            answers = [SimpleNamespace(id=q["id"], value=self.answer(request, q["id"]))
                       for q in request["questions"]]
            out.append(SimpleNamespace(answers=answers, steps=len(answers) + 1,
                                       by_id=lambda a=answers: {x.id: x for x in a}))
        return out


def test_number_skills_joint_minus_standalone_is_joint_minus_standalone(
        load_benchmark: Callable[[str], ModuleType], heldout_path: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    mod = load_benchmark("number_skills")
    rows = [_Group(f"g{i}", [_Q("a", 1), _Q("b", 2), _Q("c", True)]) for i in range(30)]
    gold = {"a": 1, "b": 2, "c": True}
    # joint: every answer right; standalone: the last question wrong in 12 of 30 documents
    model = _Model(lambda request, qid: gold[qid] if request["mode"] == "joint"
                   or int(request["document"][3:] or 0) >= 12 else False)
    numbered = [_Group(g.group_id, g.questions, f"doc{i}") for i, g in enumerate(rows)]
    mod._alone_vs_with_sources(model, numbered, 7, "compare", "with sources (joint)",
                               "both copied")
    out = capsys.readouterr().out
    assert "| alone (standalone) | 18/30 (60.0%) |" in out
    assert "| with sources (joint) | 30/30 (100.0%) |" in out
    assert "both copied in the joint pass 30/30" in out
    assert "joint - standalone +40.0 pts [" in out


# ------------------------------------------------------------------ decoding_policies.py


def test_decoding_policies_run_counts_questions_groups_and_steps(
        load_benchmark: Callable[[str], ModuleType], heldout_path: None) -> None:
    mod = load_benchmark("decoding_policies")
    groups = [_Group("g0", [_Q("a", 1), _Q("b", 2)]), _Group("g1", [_Q("a", 1), _Q("b", 3)]),
              _Group("g2", [_Q("a", 1), _Q("b", 2), _Q("c", 4)])]
    model = _Model(lambda request, qid: {"a": 1, "b": 2, "c": 4}[qid])  # g1's b wrong
    acc, whole, steps = mod.run(model, groups, "joint", 0.9, "row", "token", 2)
    assert acc == pytest.approx(6 / 7) and whole == pytest.approx(2 / 3)
    assert steps == pytest.approx((3 + 3 + 4) / 3)


# ------------------------------------------------------------------ rule_confusion.py


def test_rule_confusion_cells_are_gold_then_answer(
        load_benchmark: Callable[[str], ModuleType], heldout_path: None,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    mod = load_benchmark("rule_confusion")
    options = {"type": "choice", "options": ["yes", "no", "not stated"]}
    groups = [_Group(f"g{i}", [_Q("r", "yes", answer=options, qtype="rule")]) for i in range(3)]
    model = _Model(lambda request, qid: "no")  # gold yes, answered no: three times
    monkeypatch.setattr(mod, "model_and_groups", lambda args: (model, groups))
    monkeypatch.setattr(sys, "argv", ["rule_confusion.py", "--groups", "3"])
    assert mod.main() == 0
    (row,) = rows(capsys.readouterr().out)
    heads = [f"{g} -> {a}" for g in mod.OUTCOMES for a in mod.OUTCOMES]
    assert dict(zip(heads, row[1:], strict=True))["yes -> no"] == "3"
    assert sum(int(c) for c in row[1:]) == 3


# ------------------------------------------------------------------ decision/evaluate.py


def test_eval_latency_is_each_batch_time_over_its_own_groups(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """4 groups in batches of 3: the last batch holds one group, 60 ms like every other."""
    import decision.evaluate as ev

    clock = _Clock()
    monkeypatch.setattr(ev, "time", clock)
    groups = [_Group(f"g{i}", [_Q("a", 1)]) for i in range(4)]

    class Model(_Model):
        def decide_many(self, requests: list[dict[str, Any]], config: Any = None) -> list[Any]:
            clock.advance(0.060 * len(requests))
            return super().decide_many(requests, config)

    records, latency = ev.evaluate_groups(Model(lambda r, q: 1), groups, batch_size=3)
    assert latency == {m: [pytest.approx(60.0)] * 4 for m in ("joint", "standalone")}
    assert len(records) == 8 and all(r.correct for r in records)
    summary = ev.latency_summary({"joint": [1.0, 2.0, 9.0]})["joint"]
    assert summary == {"mean_ms": 4.0, "median_ms": 2.0, "p90_ms": 9.0}


# ------------------------------------------------------ apps/xiangqi/agreement.py, matches.py


def test_xiangqi_phases_split_at_ply_20_and_80() -> None:
    from apps.xiangqi.agreement import game_phase

    assert [game_phase(p) for p in (0, 19, 20, 79, 80, 200)] == [
        "opening (ply < 20)", "opening (ply < 20)", "middle (20-79)", "middle (20-79)",
        "late (80+)", "late (80+)"]


def test_xiangqi_match_score_counts_unfinished_games_as_draws(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import apps.xiangqi.matches as matches

    # game i: the model is red when i is even; results in game order
    results: Iterator[str] = iter(["1-0", "1-0", "1/2-1/2", "*", "0-1", "0-1"])
    monkeypatch.setattr(matches, "play_game", lambda red, black, max_plies: (next(results), []))
    match = matches.play_match(SimpleNamespace(tokenizer=None), "random", games=6, concurrency=1)
    assert [r["outcome"] for r in match.results] == ["win", "loss", "draw", "unfinished",
                                                     "loss", "win"]
    assert (match.wins, match.draws, match.unfinished, match.losses) == (2, 1, 1, 2)
    assert match.score == pytest.approx((2 + (1 + 1) / 2) / 6)


# ------------------------------------------------------------------ small helpers


def test_bucket_edges_of_the_book_ceiling(load_benchmark: Callable[[str], ModuleType]) -> None:
    mod = load_benchmark("xiangqi_book_ceiling")
    plies = {p: mod._bucket(p, mod.PLY_BUCKETS) for p in (0, 9, 10, 19, 20, 29, 30, 99)}
    assert plies == {0: "ply 0-9", 9: "ply 0-9", 10: "ply 10-19", 19: "ply 10-19",
                     20: "ply 20-29", 29: "ply 20-29", 30: "ply 30+", 99: "ply 30+"}
    counts = [mod._bucket(c, mod.COUNT_BUCKETS) for c in (1, 2, 4, 5, 19, 20)]
    assert counts == ["in training 1x", "in training 2-4x", "in training 2-4x",
                      "in training 5-19x", "in training 5-19x", "in training 20+x"]


def test_document_length_summary_is_mean_median_max(
        load_benchmark: Callable[[str], ModuleType]) -> None:
    mod = load_benchmark("xiangqi_document_length")
    assert mod.summary([1, 2, 9]) == {"mean": 4.0, "median": 2, "max": 9}
    assert mod.summary([3, 1, 4, 10]) == {"mean": 4.5, "median": 3.5, "max": 10}



def test_train_step_ratio_is_the_variant_over_plain_order(
        load_benchmark: Callable[[str], ModuleType]) -> None:
    """"/ plain" is each variant's median step time over plain order's: a variant twice as slow
    reads 2.00 (inverted, plain / variant, it read 0.50; means instead of medians, 0.59)."""
    mod = load_benchmark("train_step")
    times = {"plain order": [1.0, 1.0, 5.0], "sorted windows of 32": [2.0, 0.1, 2.0],
             "plain order, bf16 autocast": [0.5, 0.5, 0.5]}
    table = rows("\n".join(mod.table(times, {name: 10.4 for name in times})))
    assert table == [["plain order", "10", "1.000", "1.00"],
                     ["sorted windows of 32", "10", "2.000", "2.00"],
                     ["plain order, bf16 autocast", "10", "0.500", "0.50"]]
