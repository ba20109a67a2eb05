"""``decision eval``: both modes on the same questions, metrics, reports, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from decision.errors import DecisionInputError
from decision.evaluate import _same, main, run_eval


def test_typed_equality() -> None:
    assert _same(True, True) and _same(12, 12) and _same("no", "no")
    assert not _same(True, 1) and not _same(1, True) and not _same("12", 12)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from decision.serve.testing import tiny_checkpoint

    return tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


def test_eval_reports_both_modes_on_the_same_questions(tiny_dir: Path, tmp_path: Path) -> None:
    from apps.contracts.generator import generate_groups

    groups = list(generate_groups(20_000_000, 4, 2))
    n_questions = sum(len(g.questions) for g in groups)
    result, report = run_eval(str(tiny_dir), 20_000_000, 4, batch_size=3, out_dir=str(tmp_path),
                              n_boot=200)
    assert set(result["modes"]) == {"joint", "standalone"}
    for mode in ("joint", "standalone"):
        m = result["modes"][mode]
        assert m["per_question"]["n"] == n_questions
        assert m["groups_fully_correct"]["n"] == 4
        assert 0.0 <= m["per_question"]["value"] <= 1.0
        assert 0.0 <= m["independence_baseline"] <= 1.0
        assert result["latency_per_group"][mode]["mean_ms"] > 0
    diff = result["joint_minus_standalone"]
    joint = result["modes"]["joint"]["per_question"]["value"]
    alone = result["modes"]["standalone"]["per_question"]["value"]
    assert diff["question"]["value"] == pytest.approx(joint - alone)
    assert result["setup"]["splits"] == ["test"]
    assert "Joint minus standalone" in report
    saved = json.loads((tmp_path / "eval.json").read_text())
    assert saved["setup"]["groups"] == 4
    assert (tmp_path / "eval.md").read_text() == report
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert len(lines) == 2 * n_questions
    from decision.evaluate import _same

    for row in map(json.loads, lines):  # the model's answer is kept, and is what was scored
        assert row["correct"] == _same(json.loads(row["answer"]), json.loads(row["gold"]))


def test_eval_rejects_bad_input(tiny_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(DecisionInputError):
        run_eval(str(tiny_dir), 20_000_000, 0)
    assert main(["--seed-start", "-5", "--groups", "2", "--model", str(tiny_dir)]) == 2
    assert "error" in capsys.readouterr().err


def test_eval_names_a_model_it_cannot_load(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-model"
    assert main(["--seed-start", "20000000", "--groups", "1", "--model", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no-model" in err and "Traceback" not in err


def record_decide_many(model: Any) -> tuple[list[dict], list[Any], Any]:
    """Wrap ``model.decide_many`` to keep every request and decision; returns both lists and
    the original method."""
    requests_seen: list[dict] = []
    decisions_seen: list[Any] = []
    original = model.decide_many

    def recording(requests, **options):  # noqa: ANN001, ANN202 - decide_many's signature
        decisions = original(requests, **options)
        requests_seen.extend(requests)
        decisions_seen.extend(decisions)
        return decisions

    model.decide_many = recording
    return requests_seen, decisions_seen, original


def test_eval_min_scope_is_passed_to_the_decoder(tiny_dir: Path) -> None:
    """Per-slot progress finishes each group in as many steps as its longest answer needs."""
    from apps.contracts.generator import generate_groups
    from decision.evaluate import evaluate_groups
    from decision.model import load_model

    model = load_model(str(tiny_dir))
    groups = list(generate_groups(20_000_000, 3, 2))
    _, decisions, _ = record_decide_many(model)
    evaluate_groups(model, groups, batch_size=3, min_scope="slot")
    slot_steps = [d.steps for d in decisions[:3]]
    decisions.clear()
    evaluate_groups(model, groups, batch_size=3, min_scope="row")
    row_steps = [d.steps for d in decisions[:3]]
    assert all(s <= r for s, r in zip(slot_steps, row_steps, strict=True))
    assert sum(slot_steps) < sum(row_steps)
    with pytest.raises(DecisionInputError):
        run_eval(str(tiny_dir), 20_000_000, 1, min_scope="token")


def test_eval_score_options_reaches_every_request(tiny_dir: Path) -> None:
    """--score-options: every closed answer of every group is the most probable option."""
    from apps.contracts.generator import generate_groups
    from decision.evaluate import evaluate_groups
    from decision.model import load_model

    model = load_model(str(tiny_dir))
    groups = list(generate_groups(20_000_000, 3, 2))
    seen, _, original = record_decide_many(model)
    records, _ = evaluate_groups(model, groups, batch_size=2, score_options=True)
    assert len(seen) == 2 * len(groups) and all(r["score_options"] for r in seen)
    assert len(records) == 2 * sum(len(g.questions) for g in groups)
    # a group with closed questions: each scored answer is the argmax of its probabilities
    g = next(i for i, group in enumerate(groups)
             if any(q.answer["type"] in ("choice", "boolean") for q in group.questions))
    decision = original([dict(seen[g], return_probabilities=True)])[0]
    scored = [a for a in decision.answers if a.option_probabilities is not None]
    assert scored
    for answer in scored:
        probs = answer.option_probabilities
        assert answer.text == max(probs, key=probs.get)


def test_eval_refuses_bad_threads_and_an_unusable_out_folder_before_it_evaluates(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--threads 0 was ignored and --threads -1 a torch traceback; --out naming a file failed
    with a FileExistsError traceback after the whole evaluation, its results lost."""
    import decision.evaluate

    def no_evaluation(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("evaluated before refusing the argument")

    monkeypatch.setattr(decision.evaluate, "evaluate_groups", no_evaluation)
    base = ["--seed-start", "20000000", "--groups", "1", "--model", str(tiny_dir)]
    for threads in ("0", "-1"):
        assert main([*base, "--threads", threads]) == 2
        assert f"error: --threads must be >= 1, got {threads}" in capsys.readouterr().err
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for out in (a_file, a_file / "sub"):
        assert main([*base, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --out {out}: cannot make the folder")
        assert err.count("\n") == 1


def test_one_group_writes_strict_json_and_a_negative_seed_is_refused_before_loading(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With one group the clustered standard error is undefined: eval.json held a bare NaN
    (JavaScript's JSON.parse refuses the file); it is null now. A negative --seed-start was
    refused only after the model had loaded (and after the TRAIN-seeds warning)."""
    run_eval(str(tiny_dir), 20_000_000, 1, batch_size=1, out_dir=str(tmp_path), n_boot=50)

    def refuse(constant: str) -> None:
        raise AssertionError(f"non-standard JSON constant {constant}")

    json.loads((tmp_path / "eval.json").read_text(), parse_constant=refuse)
    capsys.readouterr()  # the evaluation's progress lines

    import decision.model

    def no_load(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("loaded the model before refusing the seed")

    monkeypatch.setattr(decision.model, "load_model", no_load)
    assert main(["--seed-start", "-5", "--groups", "2", "--model", str(tiny_dir)]) == 2
    assert capsys.readouterr().err == "error: --seed-start must be >= 0, got -5\n"


def test_a_failed_evaluation_leaves_no_empty_out_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """--out's folders were made before the evaluation and left behind, empty, when it failed
    (here: a model folder with no checkpoint); a folder that already existed stays."""
    out = tmp_path / "new" / "deeper"
    assert main(["--seed-start", "20000000", "--groups", "1", "--model",
                 str(tmp_path / "no-model"), "--out", str(out)]) != 0
    capsys.readouterr()
    assert not (tmp_path / "new").exists()
    assert main(["--seed-start", "20000000", "--groups", "1", "--model",
                 str(tmp_path / "no-model"), "--out", str(tmp_path)]) != 0
    assert tmp_path.is_dir()


def test_latency_p90_is_nearest_rank_and_never_below_the_median() -> None:
    """p90 took the value at floor(0.9 (n - 1)): with two groups the faster one (p90 10 ms below
    the median 55 ms), with five the second slowest. Nearest-rank: the value at ceil(0.9 n)."""
    from decision.evaluate import latency_summary

    assert latency_summary({"joint": [100.0, 10.0]})["joint"]["p90_ms"] == 100.0
    assert latency_summary({"joint": [1.0, 2.0, 3.0, 4.0, 5.0]})["joint"]["p90_ms"] == 5.0
    assert latency_summary({"joint": [7.0]})["joint"]["p90_ms"] == 7.0
    values = [float(v) for v in range(1, 501)]  # 500 groups: the 450th value, as before
    assert latency_summary({"joint": values})["joint"]["p90_ms"] == 450.0
    for n in range(1, 41):
        s = latency_summary({"joint": [float((7 * i) % n) for i in range(n)]})["joint"]
        assert s["p90_ms"] >= s["median_ms"]


@pytest.mark.parametrize(("seed_start", "groups", "warned"), [
    (5, 1, True), (10_000_000, 1, True), (20_099_999, 2, True), (20_000_000, 1, False)])
def test_seeds_outside_the_test_split_are_warned_of(
    tiny_dir: Path, capsys: pytest.CaptureFixture[str], seed_start: int, groups: int,
    warned: bool,
) -> None:
    """Only TRAIN seeds were warned of: VALIDATION seeds (which select models) or a range
    running past TEST's end passed without a word, their numbers printed as any other."""
    run_eval(str(tiny_dir), seed_start, groups, batch_size=1, n_boot=10)
    err = capsys.readouterr().err
    assert ("are not all TEST seeds" in err) is warned, err
