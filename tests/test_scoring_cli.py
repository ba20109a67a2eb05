"""``decision score`` on a CSV from the contracts generator, scored by a tiny random model:
predictions, summary metrics against a direct computation, interruption and resume."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from apps.contracts import csv_format
from apps.contracts.generate import main as generate_main
from decision.cli import main as cli_main
from decision.errors import CheckpointError, CompileBusyError, DecisionInputError
from decision.scoring.output import read_predictions
from decision.scoring.runner import COMPILE_TRIES, score_csv
from decision.scoring.summary import summary_paths, write_summary
from decision.serve.engine import ModelEngine

GROUPS = 4


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoint_dir: Path) -> Path:
    return tiny_checkpoint_dir


@pytest.fixture(scope="module")
def engine(checkpoint: Path) -> ModelEngine:
    return ModelEngine.load(str(checkpoint))


@pytest.fixture(scope="module")
def input_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("csv") / "groups.csv"
    assert generate_main(["--seed-start", "20000000", "--groups", str(GROUPS), "--level", "1",
                          "--out", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory, input_csv: Path, checkpoint: Path
             ) -> Path:
    """One uninterrupted ``decision score --mode both`` through the CLI."""
    out = tmp_path_factory.mktemp("full") / "pred.csv"
    status = cli_main(["score", str(input_csv), "--out", str(out), "--mode", "both",
                       "--model", str(checkpoint), "--no-progress", "--batch-groups", "2"])
    assert status == 0
    return out


def test_predictions_cover_every_question_in_both_modes(input_csv: Path, full_run: Path) -> None:
    groups = csv_format.read_groups(input_csv)
    rows = read_predictions(full_run)
    expected = [(g.group_id, q.id, m) for g in groups for m in ("joint", "standalone")
                for q in g.questions]
    assert [(r.group_id, r.question_id, r.mode) for r in rows] == expected
    gold = {(g.group_id, q.id): (q.answer, q.gold) for g in groups for q in g.questions}
    for row in rows:
        answer, value = gold[(row.group_id, row.question_id)]
        assert row.gold is not None
        assert row.answer_type == answer["type"]
        # the prediction obeys its schema, and `correct` is the typed comparison with gold
        predicted = csv_format.parse_gold(
            {"yes": "true", "no": "false"}.get(row.prediction, row.prediction)
            if answer["type"] == "boolean" else row.prediction, answer)
        assert row.correct == (predicted == value)
        assert 0.0 <= row.confidence <= 1.0 and row.steps >= 1


def _direct(rows: Sequence[Any], mode: str) -> tuple[float, float, int]:
    """Per-question accuracy, share of groups fully correct, questions: computed by hand."""
    mine = [r for r in rows if r.mode == mode]
    per_question = sum(r.correct for r in mine) / len(mine)
    groups: dict[str, list[bool]] = {}
    for r in mine:
        groups.setdefault(r.group_id, []).append(bool(r.correct))
    fully = sum(all(v) for v in groups.values()) / len(groups)
    return per_question, fully, len(mine)


def test_summary_metrics_equal_a_direct_computation(full_run: Path) -> None:
    summary = json.loads(full_run.with_name("pred.summary.json").read_text())
    markdown = full_run.with_name("pred.summary.md").read_text()
    rows = read_predictions(full_run)
    assert summary["groups_in_input"] == GROUPS and summary["groups_scored"] == GROUPS
    assert summary["skipped"] == [] and summary["model"] == "tiny-model"
    assert summary["modes"] == ["joint", "standalone"]
    for mode in ("joint", "standalone"):
        per_question, fully, n = _direct(rows, mode)
        stats = summary["metrics"]["modes"][mode]
        assert stats["per_question"]["value"] == pytest.approx(per_question)
        assert stats["per_question"]["n"] == n
        assert stats["groups_fully_correct"]["value"] == pytest.approx(fully)
        assert stats["groups_fully_correct"]["n"] == GROUPS
        low, high = stats["groups_fully_correct"]["low"], stats["groups_fully_correct"]["high"]
        assert 0.0 <= low <= fully <= high <= 1.0
    diff = summary["metrics"]["joint_minus_standalone"]["question"]["value"]
    assert diff == pytest.approx(_direct(rows, "joint")[0] - _direct(rows, "standalone")[0])
    assert "| joint |" in markdown and "| standalone |" in markdown


class _Interrupting:
    """The real engine, interrupted (KeyboardInterrupt) at its ``calls``-th decide_many."""

    def __init__(self, engine: ModelEngine, calls: int) -> None:
        self.inner, self.calls, self.name = engine, calls, engine.name
        self.fingerprint = engine.fingerprint  # the same weights: a resume may continue it

    def prepare(self, body: Any) -> Any:
        return self.inner.prepare(body)

    def decide_many(self, prepared: Sequence[Any]) -> list[Any]:
        self.calls -= 1
        if self.calls == 0:
            raise KeyboardInterrupt
        return self.inner.decide_many(prepared)

    def info(self) -> Any:
        return self.inner.info()


def test_interrupted_then_resumed_equals_one_uninterrupted_run(
    tmp_path: Path, input_csv: Path, engine: ModelEngine, full_run: Path
) -> None:
    out = tmp_path / "pred.csv"
    with pytest.raises(KeyboardInterrupt):
        score_csv(input_csv, out, _Interrupting(engine, calls=3), mode="both",
                  batch_groups=1, show_progress=False)
    done = {r.group_id for r in read_predictions(out)}
    assert len(done) == 2  # two whole groups were flushed before the interruption
    # the interruption may also leave a partially written line: resume must discard it
    with out.open("a", encoding="utf-8") as handle:
        handle.write("contracts-L1-20000002,q1,joint,boo")
    result = score_csv(input_csv, out, engine, mode="both", resume=True, batch_groups=2,
                       show_progress=False)
    assert result.resumed == 2 and result.scored == GROUPS - 2
    assert out.read_bytes() == full_run.read_bytes()


def test_resume_of_a_complete_file_decides_nothing(
    tmp_path: Path, input_csv: Path, engine: ModelEngine, full_run: Path
) -> None:
    out = tmp_path / "pred.csv"
    out.write_bytes(full_run.read_bytes())

    class _MustNotDecide(_Interrupting):
        def decide_many(self, prepared: Sequence[Any]) -> list[Any]:
            raise AssertionError("a complete file was decided again")

    result = score_csv(input_csv, out, _MustNotDecide(engine, 0), mode="both", resume=True,
                       show_progress=False)
    assert result.scored == 0 and result.resumed == GROUPS
    assert out.read_bytes() == full_run.read_bytes()


def test_malformed_rows_skipped_or_strict(tmp_path: Path, input_csv: Path, engine: ModelEngine,
                                          checkpoint: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    rows = list(csv.reader(input_csv.open(encoding="utf-8", newline="")))
    first_group = rows[1][0]
    kept = [rows[0]] + [r for r in rows[1:] if r[0] == first_group]
    bad = list(kept[1])
    bad[2], bad[4], bad[5] = "qbad", "choice", "[]"  # empty options
    broken = kept + [bad]
    path = tmp_path / "in.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows(broken[:-1])
    bad_line = path.read_text(encoding="utf-8").count("\n") + 1  # documents may span lines
    with path.open("a", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerow(bad)
    out = tmp_path / "pred.csv"
    status = cli_main(["score", str(path), "--out", str(out), "--mode", "joint",
                       "--model", str(checkpoint)])
    assert status == 0
    err = capsys.readouterr().err
    assert f"in.csv:{bad_line}: skipped:" in err and "non-empty JSON list" in err
    assert "groups" in err  # the progress bar went to stderr
    summary = json.loads(out.with_name("pred.summary.json").read_text())
    assert summary["skipped"][0]["line"] == bad_line
    assert summary["predictions_written"] == len(kept) - 1
    assert "## Skipped" in out.with_name("pred.summary.md").read_text()
    strict = cli_main(["score", str(path), "--out", str(tmp_path / "strict.csv"), "--strict",
                       "--model", str(checkpoint), "--no-progress"])
    assert strict == 2
    assert f"in.csv:{bad_line}:" in capsys.readouterr().err


def test_score_usage_errors(tmp_path: Path, checkpoint: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["score", str(tmp_path / "absent.csv"), "--out", str(tmp_path / "o.csv"),
                     "--model", str(checkpoint)]) == 2
    assert "no such file" in capsys.readouterr().err
    assert cli_main(["score", str(tmp_path), "--out", str(tmp_path / "o.csv"),
                     "--model", str(checkpoint)]) == 2
    assert "is a folder" in capsys.readouterr().err
    foreign = tmp_path / "o.csv"
    foreign.write_text("a,b\n1,2\n")
    src = tmp_path / "in.csv"
    src.write_text(",".join(csv_format.HEADER) + "\ng,Doc,q,Q?,boolean,{},true\n")
    assert cli_main(["score", str(src), "--out", str(foreign), "--resume",
                     "--model", str(checkpoint), "--no-progress"]) == 2
    assert "not a predictions file" in capsys.readouterr().err
    assert foreign.read_text() == "a,b\n1,2\n"  # never overwritten on resume
    # an --out that cannot be written: one line and status 2, not a traceback
    assert cli_main(["score", str(src), "--out", str(tmp_path / "no-dir" / "o.csv"),
                     "--model", str(checkpoint), "--no-progress"]) == 2
    assert "cannot write" in capsys.readouterr().err
    # an option's error names the flag as it is typed (was "--max_steps")
    assert cli_main(["score", str(src), "--out", str(tmp_path / "o2.csv"), "--max-steps", "0",
                     "--model", str(checkpoint), "--no-progress"]) == 2
    assert "--max-steps:" in capsys.readouterr().err
    # a folder as --out: refused before the model loads, leaving no run record beside it (was
    # "cannot write: Is a directory" once the model had loaded, and FOLDER-run.json left behind)
    folder = tmp_path / "preds"
    folder.mkdir()
    assert cli_main(["score", str(src), "--out", str(folder), "--model",
                     str(tmp_path / "no-model"), "--no-progress"]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert not (tmp_path / "preds-run.json").exists()


@pytest.mark.slow
def test_killed_subprocess_then_resumed_equals_uninterrupted(
    tmp_path: Path, input_csv: Path, checkpoint: Path, full_run: Path
) -> None:
    out = tmp_path / "pred.csv"
    command = [sys.executable, "-m", "decision.cli", "score", str(input_csv), "--out", str(out),
               "--mode", "both", "--model", str(checkpoint), "--no-progress",
               "--batch-groups", "1"]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]),
               OMP_NUM_THREADS="1")
    process = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and process.poll() is None:
        if out.exists() and len({r.split(",")[0] for r in out.read_text().splitlines()[1:]}) >= 2:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL, "the run ended before it could be killed"
    assert out.stat().st_size > 0
    assert cli_main(["score", str(input_csv), "--out", str(out), "--mode", "both", "--resume",
                     "--model", str(checkpoint), "--no-progress"]) == 0
    assert out.read_bytes() == full_run.read_bytes()


def test_a_group_the_model_rejects_is_skipped_whole(
    tmp_path: Path, engine: ModelEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "in.csv"
    rows = [list(csv_format.HEADER)]
    rows += [["big", "A document." if i == 0 else "", f"q{i}", "Q?", "boolean", "{}", "true"]
             for i in range(9)]
    rows += [["small", "Another document.", "q0", "Q?", "boolean", "{}", "false"]]
    with path.open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows(rows)
    out = tmp_path / "pred.csv"
    result = score_csv(path, out, engine, mode="joint", show_progress=False)
    assert [(p.line, p.group_id) for p in result.problems] == [(2, "big")]
    assert "at most 8 questions" in result.problems[0].reason
    # the hint names what `decision score` offers (it said "use mode='auto'", not an option here)
    assert "--mode standalone" in result.problems[0].reason
    assert "auto" not in result.problems[0].reason
    assert [r.group_id for r in read_predictions(out)] == ["small"]
    assert "group big skipped" in capsys.readouterr().err
    # standalone takes the nine questions one per pass
    result = score_csv(path, out, engine, mode="standalone", overwrite=True, show_progress=False)
    assert result.problems == [] and len(read_predictions(out)) == 10
    with pytest.raises(DecisionInputError, match=r"in\.csv:2: group 'big'"):
        score_csv(path, tmp_path / "strict.csv", engine, mode="joint", strict=True,
                  show_progress=False)


class _FakeEngine:
    """Answers every boolean question "yes"; ``decide_many`` raises for the document "boom"."""

    name = "fake"

    def prepare(self, body: Any) -> Any:
        return body

    def decide_many(self, prepared: Sequence[Any]) -> list[Any]:
        from types import SimpleNamespace as NS

        if any(body.document == "boom" for body in prepared):
            raise RuntimeError("the decoder failed")
        return [NS(answers=[NS(id=q.id, value=True, text="yes", confidence=0.9)
                            for q in body.questions], steps=1, tokens_per_forward=1.0)
                for body in prepared]


def _fake_csv(path: Path, documents: Sequence[str]) -> Path:
    rows = [list(csv_format.HEADER)] + [[f"g{i}", doc, "q", "Q?", "boolean", "{}", "true"]
                                        for i, doc in enumerate(documents)]
    with path.open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return path


@pytest.mark.parametrize("batch_groups", [1, 2, 3])
def test_a_failing_group_is_skipped_whatever_the_batch_size(
    tmp_path: Path, batch_groups: int
) -> None:
    # with a batch of one group the engine's exception used to end the whole run
    path = _fake_csv(tmp_path / "in.csv", ["fine", "boom", "fine too"])
    out = tmp_path / "pred.csv"
    engine: Any = _FakeEngine()
    result = score_csv(path, out, engine, batch_groups=batch_groups, show_progress=False)
    assert [(p.line, p.group_id) for p in result.problems] == [(3, "g1")]
    assert "RuntimeError: the decoder failed" in result.problems[0].reason
    assert [r.group_id for r in read_predictions(out)] == ["g0", "g2"]


class _StarvedCompiles(_FakeEngine):
    """``prepare`` raises CompileBusyError the first ``busy[doc]`` times for document ``doc``."""

    def __init__(self, busy: dict[str, int]) -> None:
        self.busy = dict(busy)

    def prepare(self, body: Any) -> Any:
        if self.busy.get(body.document, 0) > 0:
            self.busy[body.document] -= 1
            raise CompileBusyError("regex automaton did not compile (the machine is busy)",
                                   "questions.0.answer")
        return body


def test_a_starved_compile_is_tried_again_before_its_group_is_skipped(tmp_path: Path) -> None:
    # the service answers a starved compile 503 and its client retries; batch scoring, with no
    # client, retries itself, and skips the group only when every try was starved
    path = _fake_csv(tmp_path / "in.csv", ["once", "always", "fine"])
    out, log = tmp_path / "pred.csv", io.StringIO()
    engine: Any = _StarvedCompiles({"once": 1, "always": COMPILE_TRIES})
    result = score_csv(path, out, engine, show_progress=False, progress_stream=log)
    assert [r.group_id for r in read_predictions(out)] == ["g0", "g2"]
    assert [p.group_id for p in result.problems] == ["g1"]
    assert "machine is busy" in result.problems[0].reason
    assert log.getvalue().count("trying again") == 1 + (COMPILE_TRIES - 1)


class _Recording(_FakeEngine):
    """Records the documents of each ``decide_many`` batch."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def decide_many(self, prepared: Sequence[Any]) -> list[Any]:
        self.batches.append([body.document for body in prepared])
        return super().decide_many(prepared)


def test_a_resumed_run_decides_the_batches_of_one_uninterrupted_run(tmp_path: Path) -> None:
    # A batch's results may depend on what it holds (padded forwards), so a resumed run must not
    # batch the rest differently: batches are formed by position in the input, and the groups of
    # a partly written batch that are done already are decided again with it (not rewritten).
    path = _fake_csv(tmp_path / "in.csv", [f"d{i}" for i in range(5)])
    full, engine = tmp_path / "full.csv", _Recording()
    score_csv(path, full, engine, batch_groups=2, show_progress=False)
    assert engine.batches == [["d0", "d1"], ["d2", "d3"], ["d4"]]
    # killed between the writes of g2 and g3 (one batch): header and three groups are on disk
    out = tmp_path / "pred.csv"
    out.write_bytes(b"".join(full.read_bytes().splitlines(keepends=True)[:4]))
    resumed = _Recording()
    result = score_csv(path, out, resumed, resume=True, batch_groups=2, show_progress=False)
    assert result.resumed == 3 and result.scored == 2
    assert resumed.batches == [["d2", "d3"], ["d4"]]  # was [["d3", "d4"]]
    assert out.read_bytes() == full.read_bytes()


def test_messages_start_their_own_line_under_the_progress_bar(tmp_path: Path) -> None:
    path = _fake_csv(tmp_path / "in.csv", ["fine", "boom", "fine too"])
    stream = io.StringIO()
    engine: Any = _FakeEngine()
    score_csv(path, tmp_path / "pred.csv", engine, batch_groups=1, progress_stream=stream)
    text = stream.getvalue()
    message = [line for line in text.split("\n") if "skipped" in line]
    assert len(message) == 1
    # what the terminal shows of that line after its carriage returns: the message alone (it
    # used to follow the bar: "score [...] 1/3 groups ... eta 0s   in.csv:3: group g1 ...")
    assert message[0].split("\r")[-1].startswith(f"{path}:3: group g1 skipped")
    assert "groups" in text.split("\n")[-2] and text.endswith("\n")  # the bar drawn again, ended


class _Interrupted(_FakeEngine):
    def decide_many(self, prepared: Sequence[Any]) -> list[Any]:
        raise KeyboardInterrupt


def test_an_interrupted_run_ends_the_bar_and_says_how_to_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _fake_csv(tmp_path / "in.csv", ["one", "two"])
    stream = io.StringIO()
    engine: Any = _Interrupted()
    with pytest.raises(KeyboardInterrupt):
        score_csv(path, tmp_path / "a.csv", engine, progress_stream=stream)
    assert stream.getvalue().endswith("\n")  # "decision score: interrupted" gets its own line
    monkeypatch.setattr(ModelEngine, "load", lambda *a, **k: _Interrupted())
    out = tmp_path / "b.csv"
    assert cli_main(["score", str(path), "--out", str(out), "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert err.endswith(f"decision score: interrupted; the groups done so far are in {out}: "
                        "run it again with --resume to continue\n")
    assert cli_main(["score", str(path), "--out", str(out), "--no-progress", "--resume"]) == 130
    assert "run the same command again to continue" in capsys.readouterr().err


def test_resume_with_another_mode_is_refused_and_keeps_the_file(tmp_path: Path) -> None:
    path = _fake_csv(tmp_path / "in.csv", ["one", "two"])
    out = tmp_path / "pred.csv"
    engine: Any = _FakeEngine()
    score_csv(path, out, engine, mode="both", show_progress=False)
    before = out.read_bytes()
    with pytest.raises(DecisionInputError, match="started with another mode"):  # its run record
        score_csv(path, out, engine, mode="joint", resume=True, show_progress=False)
    assert out.read_bytes() == before
    # a file from before run records: it used to cut away the standalone rows (--mode joint) ...
    from decision.scoring.run_record import run_record_path

    run_record_path(out).unlink()
    with pytest.raises(DecisionInputError, match="holds standalone predictions"):
        score_csv(path, out, engine, mode="joint", resume=True, show_progress=False)
    assert out.read_bytes() == before
    # ... or keep joint rows as a standalone run's, scoring nothing (--mode standalone)
    joint = tmp_path / "joint.csv"
    score_csv(path, joint, engine, mode="joint", show_progress=False)
    run_record_path(joint).unlink()
    with pytest.raises(DecisionInputError, match="holds joint predictions"):
        score_csv(path, joint, engine, mode="standalone", resume=True, show_progress=False)
    result = score_csv(path, out, engine, mode="both", resume=True, show_progress=False)
    assert result.resumed == 2 and result.scored == 0


def test_resume_with_another_batch_size_or_device_warns_and_goes_on(tmp_path: Path) -> None:
    # the run record did not keep them: a resume with others went on without a word, though its
    # answers may differ in the last digits from one uninterrupted run's
    path = _fake_csv(tmp_path / "in.csv", [f"d{i}" for i in range(4)])
    out = tmp_path / "pred.csv"
    engine: Any = _FakeEngine()
    score_csv(path, out, engine, batch_groups=2, show_progress=False)
    from decision.scoring.run_record import run_record_path

    record = json.loads(run_record_path(out).read_text())
    assert record["batch_groups"] == 2 and record["device"] is None
    out.write_bytes(b"".join(out.read_bytes().splitlines(keepends=True)[:3]))  # two groups
    stream = io.StringIO()
    result = score_csv(path, out, engine, resume=True, batch_groups=3, show_progress=False,
                       progress_stream=stream)
    assert result.resumed == 2 and result.scored == 2
    assert "started with batch size in groups 2 (now 3)" in stream.getvalue()
    cuda: Any = _FakeEngine()
    cuda.device = "cuda:0"
    stream = io.StringIO()
    score_csv(path, out, cuda, resume=True, batch_groups=2, show_progress=False,
              progress_stream=stream)
    assert "started with device None (now 'cuda:0')" in stream.getvalue()
    stream = io.StringIO()  # the same as the record: no warning
    score_csv(path, out, engine, resume=True, batch_groups=2, show_progress=False,
              progress_stream=stream)
    assert "warning" not in stream.getvalue()


def test_resume_with_another_input_is_refused_and_keeps_the_file(tmp_path: Path) -> None:
    engine: Any = _FakeEngine()
    out = tmp_path / "pred.csv"
    score_csv(_fake_csv(tmp_path / "in.csv", ["one", "two", "three"]), out, engine,
              show_progress=False)
    before = out.read_bytes()
    # a smaller input used to cut the predictions of g2 away and report them resumed
    smaller = _fake_csv(tmp_path / "small.csv", ["one", "two"])
    with pytest.raises(DecisionInputError, match="started with other input file contents"):
        score_csv(smaller, out, engine, resume=True, show_progress=False)
    assert out.read_bytes() == before
    from decision.scoring.run_record import run_record_path

    run_record_path(out).unlink()  # a file from before run records: recover's own refusal
    with pytest.raises(DecisionInputError, match="group 'g2', which this input does not have"):
        score_csv(smaller, out, engine, resume=True, show_progress=False)
    assert out.read_bytes() == before


def test_an_existing_out_is_replaced_only_with_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _fake_csv(tmp_path / "in.csv", ["one"])
    engine: Any = _FakeEngine()
    out = tmp_path / "notes.csv"
    out.write_text("my,own\nfile,here\n")  # used to be overwritten without a word
    with pytest.raises(DecisionInputError, match="exists; pass --resume to continue it or "
                                                 "--overwrite to replace it"):
        score_csv(path, out, engine, show_progress=False)
    assert out.read_text() == "my,own\nfile,here\n"
    # the CLI refuses before it loads a model (there is none at --model here)
    assert cli_main(["score", str(path), "--out", str(out), "--model",
                     str(tmp_path / "no-model")]) == 2
    assert "--overwrite to replace it" in capsys.readouterr().err
    assert out.read_text() == "my,own\nfile,here\n"
    score_csv(path, out, engine, overwrite=True, show_progress=False)
    assert [r.group_id for r in read_predictions(out)] == ["g0"]
    empty = tmp_path / "empty.csv"
    empty.touch()  # an empty file (mktemp) is nobody's data
    score_csv(path, empty, engine, show_progress=False)
    with pytest.raises(DecisionInputError, match="not both"):
        score_csv(path, out, engine, resume=True, overwrite=True, show_progress=False)
    with pytest.raises(SystemExit):  # argparse: --resume and --overwrite exclude each other
        cli_main(["score", str(path), "--out", str(out), "--resume", "--overwrite"])


def test_predictions_never_overwrite_the_input(tmp_path: Path) -> None:
    path = _fake_csv(tmp_path / "in.csv", ["one"])
    before = path.read_bytes()
    engine: Any = _FakeEngine()
    with pytest.raises(DecisionInputError, match="overwrite the input"):
        score_csv(path, tmp_path / "." / "in.csv", engine, show_progress=False)
    assert path.read_bytes() == before


def test_ctrl_c_while_the_model_loads_is_an_interruption_not_a_bad_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Safetensors' Rust code reads a tensor through Python code (torch's storage __getitem__); a
    # Ctrl-C landing there came back as a failed read, which CheckpointReader.get wraps: the run
    # said "cannot load the model: ... could not determine the shape of object type
    # 'torch.storage.UntypedStorage'" with status 2, as for a broken checkpoint.
    def load(*args: Any, **kwargs: Any) -> Any:
        try:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C, while a tensor is read
        except KeyboardInterrupt:
            raise CheckpointError(
                "model.safetensors: cannot read tensor 'w': could not determine the shape of "
                "object type 'torch.storage.UntypedStorage'") from None
        raise AssertionError("no KeyboardInterrupt")

    monkeypatch.setattr(ModelEngine, "load", load)
    path = _fake_csv(tmp_path / "in.csv", ["one"])
    assert cli_main(["score", str(path), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert err.endswith("decision score: interrupted\n") and "cannot load" not in err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    # a load that fails on its own is still reported as such
    monkeypatch.setattr(ModelEngine, "load", lambda *a, **k: (_ for _ in ()).throw(
        CheckpointError("no weights")))
    assert cli_main(["score", str(path), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 2
    assert "cannot load the model: no weights" in capsys.readouterr().err


def test_a_run_stopped_while_writing_the_summary_keeps_the_summary_it_had(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _fake_csv(tmp_path / "in.csv", ["one", "two"])
    out = tmp_path / "pred.csv"
    engine: Any = _FakeEngine()
    monkeypatch.setattr(ModelEngine, "load", lambda *a, **k: engine)
    assert cli_main(["score", str(path), "--out", str(out), "--no-progress"]) == 0
    json_path, md_path = summary_paths(out)
    before = json_path.read_bytes(), md_path.read_bytes()
    real_write_text = Path.write_text

    def killed_halfway(self: Path, data: str, *args: Any, **kwargs: Any) -> int:
        # a kill while the file is written: half of it on disk, then the process is gone
        real_write_text(self, data[: len(data) // 2], *args, **kwargs)
        raise KeyboardInterrupt

    # --resume of the finished file, stopped while it rewrites the summary: the summary was
    # left torn (half a JSON document), the good one it replaced lost
    monkeypatch.setattr(Path, "write_text", killed_halfway)
    status = cli_main(["score", str(path), "--out", str(out), "--no-progress", "--resume"])
    monkeypatch.setattr(Path, "write_text", real_write_text)
    assert (json_path.read_bytes(), md_path.read_bytes()) == before
    assert status == 130
    assert capsys.readouterr().err.endswith(  # it said only "decision score: interrupted"
        f"the groups done so far are in {out}: run the same command again to continue\n")
    # running it again writes the summary (over the part files the stop left)
    result = score_csv(path, out, engine, resume=True, show_progress=False)
    write_summary(result, out, "fake", path)
    assert json.loads(json_path.read_text())["groups_kept_from_before"] == 2
    assert not list(tmp_path.glob("*.part"))  # renamed into place


def test_resume_with_another_model_input_or_options_is_refused_and_keeps_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--resume checked the mode and the ids only: resumed with another model (or the same ids
    over other documents, or another threshold) it mixed two runs' answers without a word."""
    from decision.scoring.run_record import run_record_path
    from decision.serve.api import DecideOptions

    path = _fake_csv(tmp_path / "in.csv", ["one", "two", "three"])
    out = tmp_path / "pred.csv"
    first: Any = _FakeEngine()
    first.fingerprint = "weights-a"
    score_csv(path, out, first, batch_groups=1, show_progress=False)
    lines = out.read_text(encoding="utf-8").splitlines()
    out.write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")  # as if stopped after g0
    kept = out.read_bytes()
    assert run_record_path(out).name == "pred.run.json"

    other: Any = _FakeEngine()
    other.fingerprint = "weights-b"
    with pytest.raises(DecisionInputError, match="started with another model"):
        score_csv(path, out, other, resume=True, show_progress=False)
    edited = _fake_csv(tmp_path / "edited.csv", ["one", "2", "three"])  # same ids
    edited.replace(path.with_name("in2.csv"))
    with pytest.raises(DecisionInputError, match="other input file contents"):
        score_csv(path.with_name("in2.csv"), out, first, resume=True, show_progress=False)
    with pytest.raises(DecisionInputError, match="other decoding options"):
        score_csv(path, out, first, resume=True, show_progress=False,
                  options=DecideOptions(threshold=0.5))
    assert out.read_bytes() == kept  # untouched by every refusal
    result = score_csv(path, out, first, resume=True, show_progress=False)  # the same run
    assert result.resumed == 1 and result.scored == 2
    # a file from before run records: resumed with a warning that nothing could be checked
    run_record_path(out).unlink()
    out.write_text("\n".join(lines[:2]) + "\n", encoding="utf-8")
    score_csv(path, out, other, resume=True, progress_stream=sys.stderr, show_progress=False)
    assert "has no run record" in capsys.readouterr().err


def test_the_engine_fingerprint_tells_weights_apart(tmp_path: Path) -> None:
    from decision.serve.testing import tiny_checkpoint

    a = ModelEngine.load(str(tiny_checkpoint(tmp_path / "a", seed=0)))
    again = ModelEngine.load(str(tiny_checkpoint(tmp_path / "again", seed=0)))
    b = ModelEngine.load(str(tiny_checkpoint(tmp_path / "b", seed=1)))
    assert a.fingerprint == again.fingerprint != b.fingerprint


def test_a_resume_refused_by_the_run_record_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    """recover cut the file before the run record refused the resume: the same ids with a
    question added to g0 cut every group away (g0 looked incomplete), and another model cut a
    torn last group, both then refused "the file is left as it was" (docs/service.md)."""
    out = tmp_path / "pred.csv"
    first: Any = _FakeEngine()
    first.fingerprint = "weights-a"
    path = _fake_csv(tmp_path / "in.csv", ["one", "two", "three"])
    score_csv(path, out, first, show_progress=False)
    whole = out.read_bytes()
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
    rows.insert(2, ["g0", "one", "q2", "Q2?", "boolean", "{}", "true"])  # same ids, one more
    edited = tmp_path / "edited.csv"
    with edited.open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows(rows)
    with pytest.raises(DecisionInputError, match="other input file contents"):
        score_csv(edited, out, first, resume=True, show_progress=False)
    assert out.read_bytes() == whole
    torn = whole[: whole.rindex(b"\n", 0, len(whole) - 1) + 5]  # g2's row cut short
    out.write_bytes(torn)
    other: Any = _FakeEngine()
    other.fingerprint = "weights-b"
    with pytest.raises(DecisionInputError, match="another model"):
        score_csv(path, out, other, resume=True, show_progress=False)
    assert out.read_bytes() == torn
    # checked first, the record does not warn of a file recover refuses as no predictions file
    notes, said = tmp_path / "notes.csv", io.StringIO()
    notes.write_text("my,own\nfile,here\n")
    with pytest.raises(DecisionInputError, match="not a predictions file"):
        score_csv(path, notes, first, resume=True, show_progress=False, progress_stream=said)
    assert said.getvalue() == ""


@pytest.mark.parametrize(("flags", "how"), [
    ([], "run it again with --resume"),
    (["--resume"], "run the same command again"),
    (["--overwrite"], "run it again with --resume instead of --overwrite"),
])
def test_ctrl_c_says_how_to_continue_for_each_way_of_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    flags: list[str], how: str,
) -> None:
    """The fast twin of the slow end-to-end test: each of --resume, --overwrite and neither gets
    its own hint, and the flags reach score_csv as typed."""
    import decision.scoring.runner as runner

    seen: dict[str, Any] = {}

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(ModelEngine, "load", lambda *a, **k: _FakeEngine())
    monkeypatch.setattr(runner, "score_csv", interrupted)
    path = _fake_csv(tmp_path / "in.csv", ["one"])
    out = tmp_path / "p.csv"
    assert cli_main(["score", str(path), "--out", str(out), "--no-progress", "--mode", "both",
                     "--strict", "--batch-groups", "3", "--threshold", "0.5", "--max-steps",
                     "4", *flags]) == 130
    assert capsys.readouterr().err == (
        f"decision score: interrupted; the groups done so far are in {out}: {how} to continue\n")
    assert (seen["mode"], seen["strict"], seen["batch_groups"], seen["show_progress"]) == (
        "both", True, 3, False)
    assert (seen["resume"], seen["overwrite"]) == ("--resume" in flags, "--overwrite" in flags)
    assert (seen["options"].threshold, seen["options"].max_steps) == (0.5, 4)
